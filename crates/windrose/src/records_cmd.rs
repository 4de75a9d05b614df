//! `windrose gensort` and `windrose valsort`: files of the sort benchmark's 100-byte records
//! (a 10-byte key compared as unsigned bytes, then 90 bytes of payload), written and checked
//! as streams with bounded memory. The records, the generator and the checksum are
//! [`windrose_model::records`].

use crate::error::bad_input;
use crate::output::{print, print_json};
use anyhow::{anyhow, Context, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use serde::Serialize;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use windrose_model::records::{
    key_hex, Checksum, KeyDistribution, RecordGenerator, RecordSummary, DEFAULT_SKEW, RECORD_LEN,
};
use windrose_model::units::{format_size, parse_size};
use windrose_net::sink::{output_path_problem, partial_path};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// From here on SIGINT and SIGTERM set [`INTERRUPTED`] instead of killing the process, so that
/// gensort removes its temporary file.
fn catch_interrupts() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as *const () as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGTERM,
            on_interrupt as *const () as libc::sighandler_t,
        );
    }
}

/// Records generated or checked by one task: 1 MB.
const CHUNK_RECORDS: usize = 10_000;
/// Tasks per buffer read or written (run on rayon's threads): buffers of 8 MB.
const CHUNKS_PER_BUFFER: usize = 8;
/// Bytes of a buffer.
const BUFFER_LEN: usize = CHUNK_RECORDS * CHUNKS_PER_BUFFER * RECORD_LEN;

/// The summary of the records of `buf`, its 1 MB chunks summarised in parallel.
fn summarize(buf: &[u8]) -> RecordSummary {
    buf.par_chunks(CHUNK_RECORDS * RECORD_LEN)
        .map(RecordSummary::of)
        .collect::<Vec<_>>()
        .iter()
        .fold(RecordSummary::new(), |all, part| all.then(part))
}

/// Key distributions of `gensort --keys`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Keys {
    /// Uniform over the 2^80 keys.
    Uniform,
    /// A power law over the key space (see --skew).
    Skewed,
    /// Drawn uniformly from a set of --distinct keys.
    Duplicates,
}

/// `windrose gensort`.
#[derive(Debug, Args)]
#[command(after_long_help = GENSORT_HELP)]
pub struct GensortArgs {
    /// The file to write (a new name or an existing regular file, replaced when complete).
    #[arg(value_name = "OUT")]
    pub out: PathBuf,
    /// Number of records to write.
    #[arg(
        long,
        value_name = "N",
        required_unless_present = "size",
        conflicts_with = "size"
    )]
    pub records: Option<u64>,
    /// Size of the file, a whole number of 100-byte records (e.g. 1GB = 10,000,000 records).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub size: Option<u64>,
    /// Seed of the keys.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Index of the first record: the file holds records START.. of the seed, so a data set can
    /// be written in parts (one per node) that together equal one file.
    #[arg(long, value_name = "I", default_value_t = 0)]
    pub start: u64,
    /// How keys are drawn.
    #[arg(long, value_enum, default_value_t = Keys::Uniform)]
    pub keys: Keys,
    /// With --keys duplicates: the number of distinct keys [default: 1000].
    #[arg(long, value_name = "K")]
    pub distinct: Option<u64>,
    /// With --keys skewed: the exponent S (1 to 64; 1 is uniform) [default: 4]. A key is u^S as
    /// a fraction of the key space, u uniform, so the lowest fraction t of the key space holds
    /// t^(1/S) of the records: with 4, a quarter of the keys start with byte 00.
    #[arg(long, value_name = "S")]
    pub skew: Option<f64>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

const GENSORT_HELP: &str = "\
Record i (from 0) depends on the seed, the key distribution and i alone, so files written in
parts with --start are the same records as one file. Each record: a 10-byte key, then two
spaces, i as 32 hex digits, two spaces, a filler repeating each hex digit of i, four spaces and
CRLF; `valsort --check-payload` checks it.

The file is written under a temporary name in OUT's directory and renamed to OUT when complete;
OUT must be a new name or a regular file. The summary's checksum is the sum modulo 2^128 of each
record's BLAKE3 truncated to 128 bits: the same for any order of the records.

Examples:
  windrose gensort --size 1GB data.bin
  windrose gensort --records 1000000 --start 1000000 --seed 7 part1.bin
  windrose gensort --records 1000000 --keys duplicates --distinct 10 few-keys.bin";

/// `windrose valsort`.
#[derive(Debug, Args)]
#[command(after_long_help = VALSORT_HELP)]
pub struct ValsortArgs {
    /// The files of the data set, in key-range order (e.g. one per node).
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// Fail unless the checksum is this (32 hex digits, as gensort prints it).
    #[arg(long, value_name = "HEX", conflicts_with = "against")]
    pub expect_checksum: Option<String>,
    /// Fail unless there are this many records.
    #[arg(long, value_name = "N", conflicts_with = "against")]
    pub expect_records: Option<u64>,
    /// Fail unless the records are those of these files (the unsorted input, in any order):
    /// same count and checksum.
    #[arg(long, value_name = "INPUT", num_args = 1..)]
    pub against: Vec<PathBuf>,
    /// Also fail when a record's payload is not the one gensort writes (corrupted records).
    #[arg(long)]
    pub check_payload: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

const VALSORT_HELP: &str = "\
Reads the files as one sequence of 100-byte records and checks that every key is at least the
previous one (unsigned bytes), within and across files. Prints the number of records, the
duplicate keys (records whose key equals the previous one), the first and last key and the
order-independent checksum (as gensort prints it).

Exit code 0 only when the records are sorted and, if asked, the expected count and checksum
match (--expect-records/--expect-checksum, or --against the input files); 1 when they are not
(the error names the first record out of order, or what differs); 2 for bad input (a file that
cannot be read, or whose length is not a multiple of 100).

Examples:
  windrose valsort sorted.bin
  windrose valsort node0.bin node1.bin node2.bin --against input.bin
  windrose valsort out.bin --expect-records 10000000 --expect-checksum 04c1...";

/// The output of `gensort`.
#[derive(Debug, Serialize)]
struct GensortReport {
    file: String,
    records: u64,
    bytes: u64,
    seed: u64,
    start: u64,
    keys: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    distinct: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    skew: Option<f64>,
    checksum: String,
    seconds: f64,
    mb_per_s: f64,
}

/// One file of `valsort`.
#[derive(Debug, Serialize)]
struct FileReport {
    file: String,
    records: u64,
}

/// A record out of order, where it is.
#[derive(Debug, Serialize)]
struct Offender {
    /// Index in the whole data set.
    record: u64,
    file: String,
    /// Index in its file.
    record_in_file: u64,
}

/// The output of `valsort`.
#[derive(Debug, Serialize)]
struct ValsortReport {
    files: Vec<FileReport>,
    records: u64,
    checksum: String,
    duplicate_keys: u64,
    first_key: Option<String>,
    last_key: Option<String>,
    sorted: bool,
    unordered: u64,
    first_unordered: Option<Offender>,
    malformed: u64,
    first_malformed: Option<Offender>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expected_records: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expected_checksum: Option<String>,
    /// Every reason for a nonzero exit code; empty when it is 0.
    problems: Vec<String>,
    seconds: f64,
    mb_per_s: f64,
}

/// The default of `--distinct`.
const DEFAULT_DISTINCT: u64 = 1000;

fn distribution(args: &GensortArgs) -> Result<KeyDistribution> {
    if args.distinct.is_some() && args.keys != Keys::Duplicates {
        return Err(bad_input("--distinct goes with --keys duplicates"));
    }
    if args.skew.is_some() && args.keys != Keys::Skewed {
        return Err(bad_input("--skew goes with --keys skewed"));
    }
    let (d, flag) = match args.keys {
        Keys::Uniform => (KeyDistribution::Uniform, String::new()),
        Keys::Skewed => {
            let exponent = args.skew.unwrap_or(DEFAULT_SKEW);
            (
                KeyDistribution::Skewed { exponent },
                format!("--skew {exponent}"),
            )
        }
        Keys::Duplicates => {
            let distinct = args.distinct.unwrap_or(DEFAULT_DISTINCT);
            (
                KeyDistribution::Duplicates { distinct },
                format!("--distinct {distinct}"),
            )
        }
    };
    d.validate()
        .map_err(|e| bad_input(format!("{flag}: {e}")))?;
    Ok(d)
}

fn record_count(args: &GensortArgs) -> Result<u64> {
    match (args.records, args.size) {
        (Some(n), _) => Ok(n),
        (None, Some(size)) => {
            let len = RECORD_LEN as u64;
            if size % len != 0 {
                return Err(bad_input(format!(
                    "--size {size} bytes is not a whole number of {len}-byte records: \
                     use --records {} ({} bytes) or --records {}",
                    size / len,
                    size / len * len,
                    size / len + 1
                )));
            }
            Ok(size / len)
        }
        (None, None) => Err(bad_input("give --records N or --size SIZE")),
    }
}

/// Bytes free for an unprivileged writer on the file system holding `dir`.
fn free_bytes(dir: &Path) -> Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| bad_input(format!("{}: the path contains a NUL byte", dir.display())))?;
    // SAFETY: statvfs(3) with a NUL-terminated path and a zeroed struct it fills in.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot read the free space of {}", dir.display()));
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between platforms
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

pub(crate) fn bytes_bar(total: u64, show: bool, what: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    ) {
        bar.set_style(style);
    }
    bar.set_message(what.to_string());
    bar
}

fn rate(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / 1e6 / seconds
    } else {
        0.0
    }
}

/// Runs `windrose gensort`.
pub fn gensort(args: GensortArgs) -> Result<()> {
    let dist = distribution(&args)?;
    let records = record_count(&args)?;
    if args.start.checked_add(records).is_none() {
        return Err(bad_input(format!(
            "--start {} + {records} records passes the last record index ({})",
            args.start,
            u64::MAX
        )));
    }
    let bytes = records
        .checked_mul(RECORD_LEN as u64)
        .ok_or_else(|| bad_input(format!("{records} records are more bytes than 2^64")))?;
    let out = &args.out;
    if let Some(why) = output_path_problem(out) {
        return Err(bad_input(why));
    }
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let free = free_bytes(&dir)?;
    if bytes > free {
        return Err(bad_input(format!(
            "{}: {records} records are {} ({bytes} bytes) but its file system has only {} \
             ({free} bytes) free",
            out.display(),
            format_size(bytes),
            format_size(free)
        )));
    }
    let temp = partial_path(out, rand::random());
    catch_interrupts();
    let started = Instant::now();
    let bar = bytes_bar(bytes, !(args.quiet || args.json), "gensort");
    let summary = match write_records(&temp, args.seed, dist, args.start, records, &bar) {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            return Err(e.context(format!("{}: not written", out.display())));
        }
    };
    // The name may have been taken by something else meanwhile: never rename over it.
    if let Some(why) = output_path_problem(out) {
        let _ = std::fs::remove_file(&temp);
        return Err(bad_input(why));
    }
    if let Err(e) = std::fs::rename(&temp, out) {
        let _ = std::fs::remove_file(&temp);
        return Err(e)
            .with_context(|| format!("cannot move {} to {}", temp.display(), out.display()));
    }
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let report = GensortReport {
        file: out.display().to_string(),
        records,
        bytes,
        seed: args.seed,
        start: args.start,
        keys: dist.name(),
        distinct: match dist {
            KeyDistribution::Duplicates { distinct } => Some(distinct),
            _ => None,
        },
        skew: match dist {
            KeyDistribution::Skewed { exponent } => Some(exponent),
            _ => None,
        },
        checksum: summary.checksum.to_string(),
        seconds,
        mb_per_s: rate(bytes, seconds),
    };
    if args.json {
        return print_json(&report);
    }
    let mut text = format!(
        "wrote {}: {records} records ({}), records {}..{} of seed {}, keys {}",
        report.file,
        format_size(bytes),
        args.start,
        args.start + records,
        args.seed,
        dist.name()
    );
    match dist {
        KeyDistribution::Skewed { exponent } => {
            let _ = write!(text, " (exponent {exponent})");
        }
        KeyDistribution::Duplicates { distinct } => {
            let _ = write!(text, " ({distinct} distinct)");
        }
        KeyDistribution::Uniform => {}
    }
    let _ = writeln!(
        text,
        "\nchecksum {}\n{:.2} s, {:.0} MB/s",
        report.checksum, seconds, report.mb_per_s
    );
    print(&text)
}

/// Writes the records to a new file `temp`, flushed to disk; returns their summary. Buffers of
/// 8 MB are generated and summarised in parallel 1 MB chunks (each chunk's generator seeks to
/// its first record) while a writer thread writes the previous ones; three buffers in all.
fn write_records(
    temp: &Path,
    seed: u64,
    dist: KeyDistribution,
    start: u64,
    records: u64,
    bar: &ProgressBar,
) -> Result<RecordSummary> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(temp)
        .with_context(|| format!("cannot create {}", temp.display()))?;
    let gen = RecordGenerator::new(seed, dist).map_err(|e| bad_input(e.to_string()))?;
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(3);
    let (empty_tx, empty_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(3);
    for _ in 0..3 {
        empty_tx
            .send(vec![0u8; BUFFER_LEN])
            .expect("the receiver is here");
    }
    std::thread::scope(|scope| {
        let writer = scope.spawn(move || -> std::io::Result<()> {
            for buf in full_rx {
                file.write_all(&buf)?;
                bar.inc(buf.len() as u64);
                // The generator may have stopped early; then nobody takes the buffer back.
                let _ = empty_tx.send(buf);
            }
            if INTERRUPTED.load(Ordering::Relaxed) {
                return Ok(());
            }
            file.sync_all()
        });
        let mut summary = RecordSummary::new();
        let mut next = start;
        let mut left = records;
        while left > 0 && !INTERRUPTED.load(Ordering::Relaxed) {
            // Fails only when the writer stopped on an error, which join reports.
            let Ok(mut buf) = empty_rx.recv() else { break };
            let n = left.min((BUFFER_LEN / RECORD_LEN) as u64) as usize;
            buf.truncate(n * RECORD_LEN);
            let parts: Vec<RecordSummary> = buf
                .par_chunks_mut(CHUNK_RECORDS * RECORD_LEN)
                .enumerate()
                .map(|(i, chunk)| {
                    let mut g = gen.clone();
                    g.seek(next + (i * CHUNK_RECORDS) as u64);
                    g.fill(chunk);
                    RecordSummary::of(chunk)
                })
                .collect();
            summary = parts.iter().fold(summary, |all, part| all.then(part));
            if full_tx.send(buf).is_err() {
                break;
            }
            next += n as u64;
            left -= n as u64;
        }
        drop(full_tx);
        let written = writer.join().expect("the writer thread does not panic");
        written.with_context(|| format!("writing {}", temp.display()))?;
        if INTERRUPTED.load(Ordering::Relaxed) {
            return Err(anyhow!("interrupted"));
        }
        if left > 0 {
            return Err(anyhow!(
                "writing {}: the writer stopped early",
                temp.display()
            ));
        }
        Ok(summary)
    })
}

/// Reads `file`'s records into `on_chunk`, a buffer of whole records (8 MB) at a time. A length that
/// is not a multiple of 100 is bad input naming the file (checked before reading when the file
/// says its length, and at the end in any case).
pub(crate) fn read_records(
    path: &Path,
    bar: &ProgressBar,
    mut on_chunk: impl FnMut(&[u8]),
) -> Result<u64> {
    let mut file =
        File::open(path).map_err(|e| bad_input(format!("{}: cannot open: {e}", path.display())))?;
    let meta = file
        .metadata()
        .map_err(|e| bad_input(format!("{}: {e}", path.display())))?;
    if meta.is_dir() {
        return Err(bad_input(format!("{}: is a directory", path.display())));
    }
    let not_whole = |len: u64| {
        bad_input(format!(
            "{}: its length, {len} bytes, is not a multiple of {RECORD_LEN}: {} whole records \
             and {} bytes more (truncated or not a record file?)",
            path.display(),
            len / RECORD_LEN as u64,
            len % RECORD_LEN as u64
        ))
    };
    if meta.is_file() && meta.len() % RECORD_LEN as u64 != 0 {
        return Err(not_whole(meta.len()));
    }
    let mut buf = vec![0u8; BUFFER_LEN];
    let mut total = 0u64;
    loop {
        let mut filled = 0;
        while filled < buf.len() {
            match file.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(anyhow!("{}: reading: {e}", path.display())),
            }
        }
        total += filled as u64;
        if filled % RECORD_LEN != 0 {
            // Only at the end (the buffer is whole records): the file changed or is a stream.
            let mut rest = Vec::new();
            let _ = file.read_to_end(&mut rest);
            return Err(not_whole(total + rest.len() as u64));
        }
        if filled > 0 {
            on_chunk(&buf[..filled]);
            bar.inc(filled as u64);
        }
        if filled < buf.len() {
            return Ok(total / RECORD_LEN as u64);
        }
    }
}

/// The total length of the regular files among `files` (for the progress bar).
fn total_len(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// Runs `windrose valsort`.
pub fn valsort(args: ValsortArgs) -> Result<()> {
    let expected_checksum = match &args.expect_checksum {
        Some(hex) => Some(Checksum::from_hex(hex).ok_or_else(|| {
            bad_input(format!(
                "--expect-checksum {hex:?}: expected 32 hex digits, as gensort and valsort print"
            ))
        })?),
        None => None,
    };
    let started = Instant::now();
    let show = !(args.quiet || args.json);
    let mut expected_records = args.expect_records;
    let mut expected_checksum = expected_checksum;
    if !args.against.is_empty() {
        let bar = bytes_bar(total_len(&args.against), show, "input");
        let mut input = RecordSummary::new();
        for f in &args.against {
            read_records(f, &bar, |chunk| input = input.then(&summarize(chunk)))
                .with_context(|| "--against".to_string())?;
        }
        bar.finish_and_clear();
        expected_records = Some(input.records);
        expected_checksum = Some(input.checksum);
    }

    let bar = bytes_bar(total_len(&args.files), show, "valsort");
    let mut whole = RecordSummary::new();
    let mut files = Vec::new();
    // (first record index, file) of each file, to name where an offender is.
    let mut starts: Vec<(u64, String)> = Vec::new();
    for f in &args.files {
        let mut part = RecordSummary::new();
        let n = read_records(f, &bar, |chunk| part = part.then(&summarize(chunk)))?;
        starts.push((whole.records, f.display().to_string()));
        whole = whole.then(&part);
        files.push(FileReport {
            file: f.display().to_string(),
            records: n,
        });
    }
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let locate = |record: u64| {
        let (first, file) = starts
            .iter()
            .rev()
            .find(|(first, _)| *first <= record)
            .cloned()
            .unwrap_or_default();
        Offender {
            record,
            file,
            record_in_file: record - first,
        }
    };

    let mut problems = Vec::new();
    if let Some(i) = whole.first_unordered {
        let o = locate(i);
        let mut what = format!(
            "not sorted: {} record{} out of order; the first is record {} of {} (byte offset {})",
            whole.unordered,
            if whole.unordered == 1 { "" } else { "s" },
            o.record_in_file,
            o.file,
            o.record_in_file * RECORD_LEN as u64
        );
        if o.record_in_file == 0 {
            what.push_str(", smaller than the last record of the file before");
        }
        if starts.len() > 1 {
            let _ = write!(what, ", record {i} of the data set");
        }
        problems.push(what);
    }
    if args.check_payload {
        if let Some(i) = whole.first_malformed {
            let o = locate(i);
            problems.push(format!(
                "{} record{} with a payload gensort did not write; the first is record {} of {}",
                whole.malformed,
                if whole.malformed == 1 { "" } else { "s" },
                o.record_in_file,
                o.file
            ));
        }
    }
    if let Some(n) = expected_records {
        if n != whole.records {
            problems.push(format!(
                "records differ: expected {n}, found {}",
                whole.records
            ));
        }
    }
    if let Some(c) = expected_checksum {
        if c != whole.checksum {
            problems.push(format!(
                "checksum differs: expected {c}, found {}",
                whole.checksum
            ));
        }
    }
    let bytes = whole.records * RECORD_LEN as u64;
    let report = ValsortReport {
        files,
        records: whole.records,
        checksum: whole.checksum.to_string(),
        duplicate_keys: whole.duplicate_keys,
        first_key: whole.first_key.as_ref().map(key_hex),
        last_key: whole.last_key.as_ref().map(key_hex),
        sorted: whole.is_sorted(),
        unordered: whole.unordered,
        first_unordered: whole.first_unordered.map(locate),
        malformed: whole.malformed,
        first_malformed: whole.first_malformed.map(locate),
        expected_records,
        expected_checksum: expected_checksum.map(|c| c.to_string()),
        problems: problems.clone(),
        seconds,
        mb_per_s: rate(bytes, seconds),
    };
    if args.json {
        print_json(&report)?;
    } else {
        print(&render_valsort(&report))?;
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(problems.join("; ")))
    }
}

fn render_valsort(r: &ValsortReport) -> String {
    let mut t = String::new();
    if r.files.len() > 1 {
        for f in &r.files {
            let _ = writeln!(t, "{}: {} records", f.file, f.records);
        }
    }
    let none = || "-".to_string();
    let _ = writeln!(t, "records         {}", r.records);
    let _ = writeln!(t, "checksum        {}", r.checksum);
    let _ = writeln!(t, "duplicate keys  {}", r.duplicate_keys);
    let _ = writeln!(
        t,
        "first key       {}",
        r.first_key.clone().unwrap_or_else(none)
    );
    let _ = writeln!(
        t,
        "last key        {}",
        r.last_key.clone().unwrap_or_else(none)
    );
    let _ = writeln!(
        t,
        "sorted          {}",
        if r.sorted {
            "yes".to_string()
        } else {
            format!(
                "no ({} record{} out of order)",
                r.unordered,
                if r.unordered == 1 { "" } else { "s" }
            )
        }
    );
    if r.malformed > 0 {
        let _ = writeln!(t, "malformed       {} records", r.malformed);
    }
    let _ = writeln!(t, "{:.2} s, {:.0} MB/s", r.seconds, r.mb_per_s);
    if r.problems.is_empty() {
        let mut ok = "OK: sorted".to_string();
        if r.expected_records.is_some() || r.expected_checksum.is_some() {
            ok.push_str(", and the expected records and checksum match");
        }
        let _ = writeln!(t, "{ok}");
    }
    t
}
