//! `windrose gensort` and `windrose valsort` end to end: generate, sort in the test, check; the
//! failures a user meets (unsorted, truncated, mismatched, a bad output name) with their exit
//! codes and messages; nothing left under a final name when a write is refused.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

const LEN: usize = 100;

fn windrose() -> Command {
    Command::cargo_bin("windrose").unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `windrose ARGS --json`, which must succeed: the parsed output.
fn json_ok(args: &[&str]) -> Value {
    let out = windrose().args(args).arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "windrose {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The records of `path` sorted by key with the standard library's sort, written to `to`.
fn sort_file(path: &Path, to: &Path) -> Vec<Vec<u8>> {
    let data = std::fs::read(path).unwrap();
    let mut records: Vec<Vec<u8>> = data.chunks(LEN).map(<[u8]>::to_vec).collect();
    records.sort_by(|a, b| a[..10].cmp(&b[..10]));
    std::fs::write(to, records.concat()).unwrap();
    records
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn gensort_then_sort_then_valsort_passes_with_the_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.bin");
    let g = json_ok(&["gensort", "--records", "5000", "--seed", "3", s(&input)]);
    assert_eq!(g["records"], 5000);
    assert_eq!(g["bytes"], 500_000);
    assert_eq!(g["keys"], "uniform");
    let checksum = g["checksum"].as_str().unwrap().to_string();
    assert_eq!(checksum.len(), 32);
    assert_eq!(std::fs::metadata(&input).unwrap().len(), 500_000);
    assert_eq!(
        names_in(dir.path()),
        ["input.bin"],
        "no temporary file left"
    );

    // The input itself is not sorted (and valsort says so), but has the same checksum.
    let out = windrose()
        .args(["valsort", s(&input), "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["sorted"], false);
    assert_eq!(v["checksum"], checksum.as_str());

    let sorted = dir.path().join("sorted.bin");
    let records = sort_file(&input, &sorted);
    let v = json_ok(&[
        "valsort",
        s(&sorted),
        "--expect-records",
        "5000",
        "--expect-checksum",
        &checksum,
        "--check-payload",
    ]);
    assert_eq!(v["sorted"], true);
    assert_eq!(v["records"], 5000);
    assert_eq!(v["checksum"], checksum.as_str());
    assert_eq!(v["duplicate_keys"], 0);
    assert_eq!(v["malformed"], 0);
    assert_eq!(v["problems"], serde_json::json!([]));
    let hex = |r: &[u8]| {
        r[..10]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert_eq!(v["first_key"], hex(&records[0]));
    assert_eq!(v["last_key"], hex(&records[4999]));

    // The human output says the same; --against the unsorted input agrees.
    windrose()
        .args(["valsort", s(&sorted), "--against", s(&input)])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!(
            "checksum        {checksum}"
        )))
        .stdout(predicate::str::contains("records         5000"))
        .stdout(predicate::str::contains("OK: sorted"));
}

/// Written in two parts with --start, the records are those of one file; split into key ranges
/// over three files, valsort checks order across them.
#[test]
fn parts_equal_the_whole_and_order_spans_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let args = ["--seed", "9", "--keys", "skewed", "--skew", "3"];
    let whole = json_ok(
        &[
            &["gensort", "--records", "3000"][..],
            &args,
            &[s(&p("whole"))],
        ]
        .concat(),
    );
    json_ok(&[&["gensort", "--records", "1000"][..], &args, &[s(&p("a"))]].concat());
    json_ok(
        &[
            &["gensort", "--size", "200kB", "--start", "1000"][..],
            &args,
            &[s(&p("b"))],
        ]
        .concat(),
    );
    let mut joined = std::fs::read(p("a")).unwrap();
    joined.extend(std::fs::read(p("b")).unwrap());
    assert_eq!(joined, std::fs::read(p("whole")).unwrap());

    let records = sort_file(&p("whole"), &p("sorted"));
    for (i, range) in [(0, 0..1000), (1, 1000..1001), (2, 1001..3000)] {
        std::fs::write(p(&format!("node{i}")), records[range].concat()).unwrap();
    }
    let node_paths = [p("node0"), p("node1"), p("node2")];
    let nodes = [s(&node_paths[0]), s(&node_paths[1]), s(&node_paths[2])];
    let v = json_ok(
        &[
            &["valsort"][..],
            &nodes,
            &["--against", s(&p("a")), s(&p("b"))],
        ]
        .concat(),
    );
    assert_eq!(v["checksum"], whole["checksum"]);
    assert_eq!(v["files"][1]["records"], 1);
    // Nodes given out of key-range order: the first record of the second file is out of order.
    let out = windrose()
        .args(["valsort", nodes[0], nodes[2], nodes[1]])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "the first is record 0 of {} (byte offset 0), smaller than the last record of the \
             file before, record 2999 of the data set",
            nodes[1]
        )),
        "{err}"
    );
}

#[test]
fn an_unsorted_file_fails_naming_the_first_offending_record() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bin");
    json_ok(&["gensort", "--records", "400", s(&input)]);
    let sorted = dir.path().join("sorted.bin");
    let mut records = sort_file(&input, &sorted);
    records.swap(123, 300);
    let bad = dir.path().join("bad.bin");
    std::fs::write(&bad, records.concat()).unwrap();
    // Moving a larger key to 123 puts 124 (smaller than it) out of order; 300 gets a smaller
    // key than 299.
    windrose()
        .args(["valsort", s(&bad)])
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "sorted          no (2 records out of order)",
        ))
        .stderr(predicate::str::contains(format!(
            "error: not sorted: 2 records out of order; the first is record 124 of {} (byte \
             offset 12400)",
            bad.display()
        )));
    let out = windrose()
        .args(["valsort", s(&bad), "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["first_unordered"]["record_in_file"], 124);
    assert_eq!(v["unordered"], 2);
    assert_eq!(v["problems"].as_array().unwrap().len(), 1);
}

#[test]
fn mismatched_count_checksum_or_payload_fails_naming_what_differs() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bin");
    let g = json_ok(&[
        "gensort",
        "--records",
        "300",
        "--keys",
        "duplicates",
        "--distinct",
        "4",
        s(&input),
    ]);
    let sorted = dir.path().join("sorted.bin");
    let mut records = sort_file(&input, &sorted);
    let v = json_ok(&["valsort", s(&sorted), "--against", s(&input)]);
    assert_eq!(v["duplicate_keys"], 296, "300 records, 4 distinct keys");

    // A record lost: count and checksum differ.
    let lost = dir.path().join("lost.bin");
    std::fs::write(&lost, records[1..].concat()).unwrap();
    windrose()
        .args(["valsort", s(&lost), "--against", s(&input)])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "records differ: expected 300, found 299",
        ))
        .stderr(predicate::str::contains(format!(
            "checksum differs: expected {}",
            g["checksum"].as_str().unwrap()
        )));
    // One payload byte changed: same count and order, other checksum, and --check-payload
    // names the record.
    records[42][50] ^= 0x01;
    let changed = dir.path().join("changed.bin");
    std::fs::write(&changed, records.concat()).unwrap();
    windrose()
        .args(["valsort", s(&changed), "--check-payload"])
        .args(["--expect-records", "300", "--expect-checksum"])
        .arg(g["checksum"].as_str().unwrap())
        .assert()
        .code(1)
        .stderr(predicate::str::contains("records differ").not())
        .stderr(predicate::str::contains("checksum differs"))
        .stderr(predicate::str::contains(format!(
            "1 record with a payload gensort did not write; the first is record 42 of {}",
            changed.display()
        )));
    windrose()
        .args(["valsort", s(&sorted), "--expect-checksum", "xyz"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--expect-checksum \"xyz\""));
}

#[test]
fn a_truncated_file_fails_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bin");
    json_ok(&["gensort", "--records", "50", s(&input)]);
    let data = std::fs::read(&input).unwrap();
    let short = dir.path().join("short.bin");
    std::fs::write(&short, &data[..4950 - 7]).unwrap();
    windrose()
        .args(["valsort", s(&input), s(&short)])
        .assert()
        .code(2)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains(format!(
            "error: {}: its length, 4943 bytes, is not a multiple of 100: 49 whole records and \
             43 bytes more",
            short.display()
        )));
    // Also as --against, and a file that does not exist.
    windrose()
        .args(["valsort", s(&input), "--against", s(&short)])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--against"))
        .stderr(predicate::str::contains("its length, 4943 bytes"));
    windrose()
        .args(["valsort", s(&dir.path().join("missing.bin"))])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("missing.bin: cannot open"));
    // An empty file is zero records, sorted.
    let empty = dir.path().join("empty.bin");
    std::fs::write(&empty, b"").unwrap();
    let v = json_ok(&["valsort", s(&empty)]);
    assert_eq!(v["records"], 0);
    assert_eq!(v["sorted"], true);
}

#[test]
fn gensort_refuses_an_output_that_is_not_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let target = dir.path().join("target.bin");
    std::fs::write(&target, b"keep me").unwrap();
    let link = dir.path().join("link.bin");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let cases: [(PathBuf, &str); 3] = [
        (sub.clone(), "is a directory"),
        (link.clone(), "is a symbolic link"),
        (dir.path().join("nowhere/out.bin"), "nowhere"),
    ];
    for (out, want) in cases {
        windrose()
            .args(["gensort", "--records", "10", s(&out)])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(out.display().to_string()))
            .stderr(predicate::str::contains(want));
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    assert!(sub.read_dir().unwrap().next().is_none());
    assert_eq!(names_in(dir.path()), ["link.bin", "sub", "target.bin"]);
    // An existing regular file is replaced.
    json_ok(&["gensort", "--records", "10", s(&target)]);
    assert_eq!(std::fs::metadata(&target).unwrap().len(), 1000);
}

#[test]
fn gensort_refuses_bad_sizes_and_parameters_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.bin");
    let cases: [(&[&str], &str); 6] = [
        (
            &["--size", "1KiB"],
            "--size 1024 bytes is not a whole number of 100-byte records",
        ),
        (
            &["--records", "1000000000000000"],
            "but its file system has only",
        ),
        (
            &["--keys", "duplicates", "--distinct", "0"],
            "--distinct 0: the number of distinct keys must be at least 1",
        ),
        (
            &["--keys", "skewed", "--skew", "0.5"],
            "--skew 0.5: skew exponent 0.5 is out of range",
        ),
        (
            &["--distinct", "5"],
            "--distinct goes with --keys duplicates",
        ),
        (&["--size", "1zB"], "unknown unit"),
    ];
    for (args, want) in cases {
        let mut cmd = windrose();
        cmd.arg("gensort").args(args).arg(&out);
        if !args.contains(&"--records") && !args.contains(&"--size") {
            cmd.args(["--records", "10"]);
        }
        cmd.assert().code(2).stderr(predicate::str::contains(want));
    }
    assert!(names_in(dir.path()).is_empty(), "nothing written");
}

/// The same seed gives the same file; duplicates mode has at most --distinct keys.
#[test]
fn gensort_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    let args = [
        "gensort",
        "--records",
        "2000",
        "--keys",
        "duplicates",
        "--distinct",
        "7",
    ];
    json_ok(&[&args[..], &[s(&a)]].concat());
    json_ok(&[&args[..], &[s(&b)]].concat());
    json_ok(&[&args[..], &["--seed", "1", s(&c)]].concat());
    let (da, db, dc) = (
        std::fs::read(&a).unwrap(),
        std::fs::read(&b).unwrap(),
        std::fs::read(&c).unwrap(),
    );
    assert_eq!(da, db);
    assert_ne!(da, dc);
    let keys: std::collections::HashSet<&[u8]> = da.chunks(LEN).map(|r| &r[..10]).collect();
    assert_eq!(keys.len(), 7);
}

/// Larger than one 8 MB buffer of gensort and valsort (each split into 1 MB chunks generated
/// and summarised in parallel): the file is the model's generator's records from --start,
/// and both commands print the checksum of the whole, unsorted and sorted.
#[test]
fn buffers_and_parallel_chunks_add_up_to_the_model() {
    use windrose_model::records::{KeyDistribution, RecordGenerator, RecordSummary};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.bin");
    let n = 85_123usize;
    let g = json_ok(&[
        "gensort",
        "--records",
        "85123",
        "--start",
        "5",
        "--seed",
        "77",
        "--keys",
        "skewed",
        s(&out),
    ]);
    let mut want = vec![0u8; n * LEN];
    let mut gen = RecordGenerator::new(77, KeyDistribution::Skewed { exponent: 4.0 }).unwrap();
    gen.seek(5);
    gen.fill(&mut want);
    let data = std::fs::read(&out).unwrap();
    assert!(
        data == want,
        "gensort's file differs from the model's records"
    );
    let summary = RecordSummary::of(&want);
    assert_eq!(g["checksum"], summary.checksum.to_string());
    let res = windrose()
        .args(["valsort", s(&out), "--json"])
        .output()
        .unwrap();
    assert_eq!(res.status.code(), Some(1), "unsorted");
    let v: Value = serde_json::from_slice(&res.stdout).unwrap();
    assert_eq!(v["checksum"], summary.checksum.to_string());
    assert_eq!(v["unordered"], summary.unordered);
    assert_eq!(v["duplicate_keys"], summary.duplicate_keys);
    assert_eq!(
        v["first_unordered"]["record"],
        summary.first_unordered.unwrap()
    );
    let sorted = dir.path().join("sorted.bin");
    sort_file(&out, &sorted);
    let v = json_ok(&["valsort", s(&sorted), "--against", s(&out)]);
    assert_eq!(v["sorted"], true);
    assert_eq!(v["records"], n);
}

/// SIGTERM (or SIGINT) while gensort writes: it removes its temporary file, leaves OUT as it was
/// and exits with 1. The signal is sent once the temporary file has data, with 2 GB still to
/// write (seconds of work), so the run is always caught mid-write.
#[test]
fn an_interrupted_gensort_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.bin");
    std::fs::write(&out, b"old").unwrap();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("windrose"))
        .args(["gensort", "--size", "2GB", "--quiet", s(&out)])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let partial = loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            // A machine whose disk cannot hold 2 GB: gensort refused before writing.
            assert!(
                err.contains("free"),
                "gensort ended early ({status}): {err}"
            );
            eprintln!("skipped: {err}");
            return;
        }
        let started = names_in(dir.path())
            .into_iter()
            .find(|n| n.starts_with(".out.bin.windrose-partial-"))
            .map(|n| dir.path().join(n))
            .filter(|p| std::fs::metadata(p).map(|m| m.len() > 0).unwrap_or(false));
        if let Some(p) = started {
            break p;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{}: not written: interrupted", out.display())),
        "{err}"
    );
    assert!(!partial.exists());
    assert_eq!(names_in(dir.path()), ["out.bin"]);
    assert_eq!(std::fs::read(&out).unwrap(), b"old");
}
