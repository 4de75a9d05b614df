//! `windrose sort` end to end: gensort writes each member's share, sort runs (each protocol,
//! 4 to 8 loopback members, in this process with --local or as `group serve` processes),
//! valsort checks the outputs against the inputs; and the bad inputs a user meets, each a clear
//! error with nothing left under a final name (nor under a temporary one).

#[path = "support/procs.rs"]
mod procs;

use procs::{free_ports, windrose, write_group, Members};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LEN: usize = 100;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Member i's share: records `i * per .. (i + 1) * per - 7 i` of one seeded set (unequal
/// shares), keys as `keys` (gensort's flags).
fn gensort_shares(dir: &Path, n: usize, per: usize, keys: &[&str]) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("in-{i}"));
            windrose()
                .args(["gensort", "--quiet", "--seed", "11"])
                .args(["--records", &(per - 7 * i).to_string()])
                .args(["--start", &(i * per).to_string()])
                .args(keys)
                .arg(&p)
                .assert()
                .success();
            p
        })
        .collect()
}

/// Every record of `files` sorted by the standard library: the expected concatenation.
fn sorted_records(files: &[PathBuf]) -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = files
        .iter()
        .flat_map(|f| {
            std::fs::read(f)
                .unwrap()
                .chunks(LEN)
                .map(<[u8]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect();
    all.sort_unstable();
    all
}

/// valsort of the outputs against the inputs must pass.
fn valsort_ok(outputs: &[PathBuf], inputs: &[PathBuf]) {
    let out = windrose()
        .arg("valsort")
        .args(outputs)
        .arg("--against")
        .args(inputs)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "valsort: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn check_sorted(dir: &Path, n: usize, inputs: &[PathBuf]) -> Vec<PathBuf> {
    let outputs: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("out-{i}"))).collect();
    valsort_ok(&outputs, inputs);
    // Brute force: the outputs in member order are the sorted inputs, byte for byte.
    let got: Vec<Vec<u8>> = outputs
        .iter()
        .flat_map(|f| {
            std::fs::read(f)
                .unwrap()
                .chunks(LEN)
                .map(<[u8]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(got == sorted_records(inputs), "not the sorted input");
    // No temporary file left.
    let mut want: Vec<String> = (0..n)
        .flat_map(|i| [format!("in-{i}"), format!("out-{i}")])
        .collect();
    want.sort();
    assert_eq!(names_in(dir), want);
    outputs
}

#[test]
fn gensort_sort_valsort_with_each_protocol_on_local_members() {
    let cases: [(&str, usize, &[&str], &[&str]); 3] = [
        (
            "heterosort",
            4,
            &["--keys", "skewed"],
            &["--speeds", "1,2,4,1"],
        ),
        (
            "heterosort",
            6,
            &["--keys", "uniform"],
            &["--slicing", "equal"],
        ),
        (
            "sample-sort",
            8,
            &["--keys", "duplicates", "--distinct", "5"],
            &["--compress", "none"],
        ),
    ];
    for (protocol, n, keys, extra) in cases {
        let dir = tempfile::tempdir().unwrap();
        let inputs = gensort_shares(dir.path(), n, 1500, keys);
        let out = windrose()
            .args(["sort", "--local", "--nodes", &n.to_string(), "--json"])
            .args(["--protocol", protocol])
            .args(extra)
            .args(["--input", s(&dir.path().join("in-{id}"))])
            .args(["--output", s(&dir.path().join("out-{id}"))])
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{protocol}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let total: u64 = (0..n).map(|i| 1500 - 7 * i as u64).sum();
        assert_eq!(v["records"], total, "{v}");
        assert_eq!(v["members"], n as u64);
        assert_eq!(v["protocol"], protocol);
        let slicing = match extra {
            ["--slicing", s] => Value::from(*s),
            _ if protocol == "heterosort" => Value::from("speeds"),
            _ => Value::Null,
        };
        assert_eq!(v["slicing"], slicing, "{v}");
        let compress = if extra.contains(&"none") {
            "none"
        } else {
            "lz4"
        };
        assert_eq!(v["compress"], compress, "{v}");
        assert_eq!(v["verified"], true);
        let outs: u64 = v["per_member"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["output_records"].as_u64().unwrap())
            .sum();
        assert_eq!(outs, total);
        let outputs = check_sorted(dir.path(), n, &inputs);
        if extra.contains(&"--speeds") {
            // Speeds 1, 2, 4, 1: the speed-4 member ends with more than a speed-1 one.
            let len = |i: usize| std::fs::metadata(&outputs[i]).unwrap().len();
            assert!(len(2) > len(0), "{v}");
        }
    }
}

#[test]
fn a_running_group_sorts_its_members_files_started_from_any_member() {
    let n = 4;
    let dir = tempfile::tempdir().unwrap();
    let inputs = gensort_shares(dir.path(), n, 2000, &[]);
    let group = dir.path().join("group.toml");
    let socket = |i: usize| dir.path().join(format!("m{i}.sock"));
    let err = |i: usize| dir.path().join(format!("m{i}.err"));
    let _show = ShowOnFailure((0..n).map(err).collect());
    let _members = start_members(&group, "sort-group", n, |i, c| {
        c.arg("--quiet")
            .arg("--control")
            .arg(socket(i))
            .args(["--sort-input", s(&dir.path().join("in-{id}"))])
            .args(["--sort-output", s(&dir.path().join("out-{id}"))])
            .stderr(std::fs::File::create(err(i)).unwrap());
        (socket(i), err(i))
    });
    for protocol in [
        &["sample-sort"][..],
        &["heterosort", "--slicing", "equal"],
        // Members in two clusters: the exchange's frames between them are compressed (the
        // default), or not.
        &["heterosort", "--slicing", "splitters"],
        &["heterosort", "--slicing", "splitters", "--compress", "none"],
        &["sample-sort", "--compress", "none"],
    ] {
        for i in 0..n {
            let _ = std::fs::remove_file(dir.path().join(format!("out-{i}")));
        }
        let out = windrose()
            .args(["sort", "--json", "--protocol"])
            .args(protocol)
            .args([
                "--group",
                s(&group),
                "--id",
                "2",
                "--control",
                s(&socket(2)),
            ])
            .args(["--input", s(&dir.path().join("in-{id}"))])
            .args(["--output", s(&dir.path().join("out-{id}"))])
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{protocol:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut names = names_in(dir.path());
        names.retain(|f| !f.ends_with(".sock") && !f.ends_with(".err") && f != "group.toml");
        let mut want: Vec<String> = (0..n)
            .flat_map(|i| [format!("in-{i}"), format!("out-{i}")])
            .collect();
        want.sort();
        assert_eq!(names, want, "{protocol:?}");
        let outputs: Vec<PathBuf> = (0..n)
            .map(|i| dir.path().join(format!("out-{i}")))
            .collect();
        valsort_ok(&outputs, &inputs);
        if protocol.contains(&"splitters") {
            // Where each member's time went: its steps, in order, within its finish time.
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            for m in v["per_member"].as_array().unwrap() {
                let phases: Vec<(String, f64)> =
                    serde_json::from_value(m["phases"].clone()).unwrap_or_default();
                let at = |name: &str| {
                    phases
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|p| p.1)
                        .unwrap_or_else(|| panic!("no {name} in {m}"))
                };
                let steps = [
                    "samples_sent",
                    "splitters",
                    "exchange_start",
                    "exchange_end",
                    "merged",
                    "ready",
                    "commit",
                ];
                for w in steps.windows(2) {
                    assert!(at(w[0]) <= at(w[1]), "{} after {}: {m}", w[0], w[1]);
                }
                // Compressed, the buckets for the other cluster go out once zipped.
                if !protocol.contains(&"none") {
                    assert!(at("exchange_start") <= at("zipped"), "{m}");
                    assert!(at("zipped") <= at("exchange_end"), "{m}");
                }
                assert!(at("commit") <= m["finish_s"].as_f64().unwrap(), "{m}");
            }
        }
    }
    for i in 0..n {
        windrose()
            .args(["group", "leave", "--control", s(&socket(i))])
            .timeout(Duration::from_secs(60))
            .assert()
            .success();
    }
}

#[test]
fn a_member_that_cannot_read_its_share_fails_the_sort_and_nothing_is_kept() {
    let n = 2;
    let dir = tempfile::tempdir().unwrap();
    gensort_shares(dir.path(), n, 300, &[]);
    let group = dir.path().join("group.toml");
    let socket = |i: usize| dir.path().join(format!("m{i}.sock"));
    let err = |i: usize| dir.path().join(format!("m{i}.err"));
    let output = dir.path().join("out-{id}");
    // Member 1 was given a template its files do not match.
    let mut members = start_members(&group, "sort-refuse", n, |i, c| {
        let input = if i == 1 { "missing-{id}" } else { "in-{id}" };
        c.arg("--quiet")
            .arg("--control")
            .arg(socket(i))
            .args(["--sort-input", s(&dir.path().join(input))])
            .args(["--sort-output", s(&output)])
            .stderr(std::fs::File::create(err(i)).unwrap());
        (socket(i), err(i))
    });
    // HeteroSort refuses an empty share: member 1 refuses, nobody starts. The sample sort
    // takes it and sorts the rest: the whole-set check finds the records missing. Either
    // way the command fails, and nothing is kept under a final or a temporary name.
    for (protocol, says) in [
        (
            &["heterosort", "--slicing", "equal"][..],
            "0 of 2 members finished",
        ),
        (&["sample-sort"], "the outputs hold 300 records"),
    ] {
        let out = windrose()
            .args(["sort", "--protocol"])
            .args(protocol)
            .args(["--group", s(&group), "--id", "0"])
            .args(["--control", s(&socket(0))])
            .args(["--input", s(&dir.path().join("in-{id}"))])
            .args(["--output", s(&output)])
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{protocol:?}: {err}");
        assert!(err.contains(says), "{protocol:?}: {err}");
        let mut names = names_in(dir.path());
        names.retain(|f| !f.ends_with(".sock") && !f.ends_with(".err") && f != "group.toml");
        assert_eq!(names, ["in-0", "in-1"], "{protocol:?}");
    }
    for i in 0..n {
        windrose()
            .args(["group", "leave", "--control", s(&socket(i))])
            .timeout(Duration::from_secs(60))
            .assert()
            .success();
    }
    for c in &mut members.0 {
        c.wait().unwrap();
    }
    members.0.clear();
}

/// `windrose sort --local` with `inputs` (written as given) must fail with exit code 2 and a
/// message containing every one of `says`; the directory is left as it was (an old output
/// file keeps its bytes).
fn refused(inputs: &[&[u8]], output_dir: Option<&Path>, says: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    for (i, data) in inputs.iter().enumerate() {
        std::fs::write(dir.path().join(format!("in-{i}")), data).unwrap();
    }
    std::fs::write(dir.path().join("out-0"), b"old").unwrap();
    let before = names_in(dir.path());
    let out_dir = output_dir.unwrap_or(dir.path());
    for protocol in ["heterosort", "sample-sort"] {
        let out = windrose()
            .args(["sort", "--local", "--nodes", &inputs.len().to_string()])
            .args(["--protocol", protocol])
            .args(["--input", s(&dir.path().join("in-{id}"))])
            .args(["--output", s(&out_dir.join("out-{id}"))])
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{protocol}: {err}");
        for w in says {
            assert!(err.contains(w), "{protocol}: {err:?} does not say {w:?}");
        }
        assert_eq!(names_in(dir.path()), before, "{protocol}: files changed");
        assert_eq!(std::fs::read(dir.path().join("out-0")).unwrap(), b"old");
    }
}

fn records(n: usize, seed: u64) -> Vec<u8> {
    let mut g = windrose_model::records::RecordGenerator::new(
        seed,
        windrose_model::records::KeyDistribution::Uniform,
    )
    .unwrap();
    let mut buf = vec![0u8; n * LEN];
    g.fill(&mut buf);
    buf
}

#[test]
fn a_truncated_record_file_is_refused_naming_it() {
    let whole = records(40, 1);
    refused(
        &[&whole, &whole[..2550], &whole, &whole],
        None,
        &["in-1", "2550 bytes, is not a multiple of 100", "truncated"],
    );
}

#[test]
fn a_file_that_is_not_records_is_refused() {
    let whole = records(40, 2);
    refused(
        &[&whole, &whole, b"not a record file\n", &whole],
        None,
        &["in-2", "18 bytes, is not a multiple of 100"],
    );
}

#[test]
fn an_empty_node_share_is_refused() {
    let whole = records(40, 3);
    refused(
        &[&whole, &whole, &whole, b""],
        None,
        &["in-3", "member 3's input is empty"],
    );
}

#[test]
fn an_output_directory_that_cannot_be_written_is_refused() {
    let whole = records(40, 4);
    // /proc takes no new files, even from root (a read-only mode bit would not stop root).
    refused(
        &[&whole, &whole, &whole, &whole],
        Some(Path::new("/proc")),
        &["cannot write in /proc"],
    );
    refused(
        &[&whole, &whole, &whole, &whole],
        Some(Path::new("/nonexistent-windrose-dir")),
        &["--output", "nonexistent-windrose-dir"],
    );
}

#[test]
fn paths_and_options_that_do_not_fit_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = |args: &[&str]| {
        let out = windrose().arg("sort").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let i = dir.path().join("in-{id}");
    let o = dir.path().join("out-{id}");
    let e = err(&[
        "--local",
        "--nodes",
        "3",
        "--input",
        "a",
        "--input",
        "b",
        "--output",
        s(&o),
    ]);
    assert!(e.contains("2 paths for 3 members"), "{e}");
    let e = err(&[
        "--local",
        "--nodes",
        "2",
        "--input",
        s(&i),
        "--output",
        s(&i),
    ]);
    assert!(e.contains("is also an input"), "{e}");
    let e = err(&[
        "--local",
        "--nodes",
        "2",
        "--input",
        s(&i),
        "--output",
        "same",
        "--output",
        "same",
    ]);
    assert!(e.contains("named for two members"), "{e}");
    let e = err(&["--input", s(&i), "--output", s(&o)]);
    assert!(e.contains("--local --nodes N"), "{e}");
    // Two local members, one input and output: flags that do not go together.
    for (flags, says) in [
        (
            &["--speeds", "1,2", "--protocol", "sample-sort"][..],
            "--speeds is for --protocol heterosort",
        ),
        (
            &["--speeds", "1,2", "--slicing", "equal"],
            "--speeds is for --protocol heterosort --slicing speeds or splitters",
        ),
        (
            &["--slicing", "equal", "--protocol", "sample-sort"],
            "--slicing is for --protocol heterosort",
        ),
        (
            &["--slicing", "fast"],
            "expected one of speeds, equal, splitters",
        ),
        (
            &["--compress", "zstd"],
            "\"zstd\": expected one of lz4, none",
        ),
        (&["--protocol", "heterosort-equal"], "heterosort-equal"),
    ] {
        let mut args = vec!["--local", "--nodes", "2"];
        args.extend_from_slice(flags);
        args.extend(["--input", s(&i), "--output", s(&o)]);
        let e = err(&args);
        assert!(e.contains(says), "{flags:?}: {e}");
    }
}

#[test]
fn reproduce_heterosort_prints_table1_beside_the_paper_and_writes_its_curves() {
    let dir = tempfile::tempdir().unwrap();
    let out = windrose()
        .args([
            "reproduce",
            "heterosort",
            "--quiet",
            "--records",
            "50",
            "--out",
        ])
        .arg(dir.path())
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("  16 15 14 13 | 16 15 14 13"), "{text}");
    assert!(
        text.contains("odd lists equal to the paper's: 16/16"),
        "{text}"
    );
    assert!(text.contains("✓ Fig. 1's snake order"), "{text}");
    let table = std::fs::read_to_string(dir.path().join("table1.csv")).unwrap();
    assert_eq!(table.lines().count(), 17);
    assert!(table.contains("\n1,1 2 4 8 16,1 2 4 8 16,true,"), "{table}");
    // 5 sizes x 4 curves, each run checked sorted and whole by the command itself.
    let scaling = std::fs::read_to_string(dir.path().join("scaling.csv")).unwrap();
    assert_eq!(scaling.lines().count(), 21, "{scaling}");
    assert!(
        scaling
            .lines()
            .any(|l| l.starts_with("64,heterosort-splitters,")),
        "{scaling}"
    );
    assert!(
        scaling.lines().any(|l| l.starts_with("64,sample-sort,2,")),
        "{scaling}"
    );
    for png in ["cycles.png", "moved.png"] {
        assert!(std::fs::metadata(dir.path().join(png)).unwrap().len() > 1000);
    }
}

/// Prints the files it names (the members' logs and stderr) when the test fails: dropped
/// while the thread panics, at any step, the spawn's own wait for the control sockets
/// included.
struct ShowOnFailure(Vec<PathBuf>);

impl Drop for ShowOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for p in &self.0 {
                let text = std::fs::read_to_string(p).unwrap_or_else(|e| format!("({e})"));
                eprintln!("--- {}:\n{text}", p.display());
            }
        }
    }
}

/// Writes `group` (named `name`) with `n` members on ports from [`free_ports`] and
/// starts them with [`spawn_or_report`] (member i: `cmd(i, command)`); a member that could not
/// listen on its port (taken between the check and its bind) starts them all over with other
/// ports, at most three times. Every test here that runs `group serve` members starts them so.
fn start_members(
    group: &Path,
    name: &str,
    n: usize,
    mut cmd: impl FnMut(usize, &mut Command) -> (PathBuf, PathBuf),
) -> Members {
    let mut attempt = 0;
    loop {
        write_group(group, name, &free_ports(n));
        match spawn_or_report(group, n, &mut cmd) {
            Ok(members) => return members,
            Err(why) if attempt < 3 => {
                eprintln!("starting over with other ports: {why}");
                attempt += 1;
            }
            Err(why) => panic!("{why}"),
        }
    }
}

/// Spawns `n` `group serve` members of `group` (member i: `cmd(i, command)`, which returns its
/// control socket and the file its stderr goes to) and waits up to 30 s for every control
/// socket. A member that exits first is reported with its stderr at once: `Err` when it could
/// not listen on its port (the members are stopped and their sockets removed, so the caller
/// may start over with other ports), a panic otherwise.
fn spawn_or_report(
    group: &Path,
    n: usize,
    mut cmd: impl FnMut(usize, &mut Command) -> (PathBuf, PathBuf),
) -> Result<Members, String> {
    let mut members = Members(Vec::new());
    let mut files = Vec::new();
    for i in 0..n {
        let mut c = Command::new(procs::bin());
        c.args(["group", "serve", "--id", &i.to_string()])
            .arg("--group")
            .arg(group)
            .stdin(Stdio::null());
        files.push(cmd(i, &mut c));
        members.0.push(c.spawn().unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !files.iter().all(|(sock, _)| sock.exists()) {
        for (i, m) in members.0.iter_mut().enumerate() {
            if let Some(status) = m.try_wait().unwrap() {
                let err = std::fs::read_to_string(&files[i].1).unwrap_or_default();
                let why = format!("member {i} exited ({status}) before its control socket: {err}");
                if err.contains("Address already in use") {
                    drop(members);
                    for (sock, _) in &files {
                        let _ = std::fs::remove_file(sock);
                    }
                    return Err(why);
                }
                panic!("{why}");
            }
        }
        assert!(
            Instant::now() < deadline,
            "control sockets: not within 30 s (missing: {:?})",
            (0..n).filter(|&i| !files[i].0.exists()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(members)
}

/// Issue 19's real kill test: 16 `group serve` processes sort with HeteroSort, two of them are
/// killed with SIGKILL mid-sort, and the survivors end with every record:
/// the command names the lost members, writes no output for them, and valsort passes over the
/// survivors' outputs against all the inputs.
///
/// It was behind `--ignored` after 2 of 34 runs stopped at the 30 s wait for the members'
/// control sockets, with the members' stderr discarded (not reproduced since; the cause below
/// matches the symptom and was shown by taking a member's port by hand): a member whose port
/// was taken between the old `bind(0)` picker and its bind exits at once ("cannot listen on ...: Address
/// already in use"), so its socket never appears. Ports now come from below the ephemeral
/// range, a member that exits early is reported with its stderr at once (and a taken port
/// starts the members over), and every member's log and stderr are printed on any failure.
#[test]
fn two_of_sixteen_members_killed_mid_sort_lose_no_record() {
    let n = 16;
    let killed = [5usize, 10];
    let dir = tempfile::tempdir().unwrap();
    let inputs = gensort_shares(dir.path(), n, 3000, &[]);
    let group = dir.path().join("group.toml");
    let log = |i: usize| dir.path().join(format!("m{i}.log"));
    let err = |i: usize| dir.path().join(format!("m{i}.err"));
    let socket = |i: usize| dir.path().join(format!("m{i}.sock"));
    // Declared before the members: on a failure they are killed first, then shown.
    let _show = ShowOnFailure((0..n).flat_map(|i| [log(i), err(i)]).collect());
    let mut members = start_members(&group, "sort-kill", n, |i, c| {
        c.arg("--control")
            .arg(socket(i))
            .args(["--sort-input", s(&dir.path().join("in-{id}"))])
            .args(["--sort-output", s(&dir.path().join("out-{id}"))])
            .stdout(std::fs::File::create(log(i)).unwrap())
            .stderr(std::fs::File::create(err(i)).unwrap());
        (socket(i), err(i))
    });
    let sort = Command::new(procs::bin())
        .args([
            "sort",
            "--json",
            "--protocol",
            "heterosort",
            "--slicing",
            "equal",
        ])
        .args([
            "--group",
            s(&group),
            "--id",
            "0",
            "--control",
            s(&socket(0)),
        ])
        .args(["--input", s(&dir.path().join("in-{id}"))])
        .args(["--output", s(&dir.path().join("out-{id}"))])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Each is killed once its first merge is done (its second "computed": the first is the
    // sort of its input, which runs while its backup copy is still on the way; cycle 1 starts
    // only once the copy is acknowledged): its copy is placed, and it is trading. (Killed
    // before its copy is placed, its records are lost: the survivors end at once and the sort
    // fails verification, naming the lost members, with nothing renamed.)
    for &k in &killed {
        procs::wait_for("the member's first merge", Duration::from_secs(60), || {
            std::fs::read_to_string(log(k))
                .unwrap_or_default()
                .matches("computed")
                .count()
                >= 2
        });
        members.0[k].kill().unwrap();
        members.0[k].wait().unwrap();
    }
    // A sort that never ends fails the test instead of holding CI.
    let mut sort = sort;
    let deadline = Instant::now() + Duration::from_secs(180);
    while sort.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = sort.kill();
            let out = sort.wait_with_output().unwrap();
            panic!(
                "the sort did not end within 180 s after two members were killed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = sort.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["lost"], serde_json::json!(killed), "{v}");
    assert_eq!(
        v["records"],
        (0..n).map(|i| 3000 - 7 * i).sum::<usize>(),
        "{v}"
    );
    let survivors: Vec<PathBuf> = (0..n)
        .filter(|i| !killed.contains(i))
        .map(|i| dir.path().join(format!("out-{i}")))
        .collect();
    valsort_ok(&survivors, &inputs);
    let mut names = names_in(dir.path());
    names.retain(|f| f.starts_with("out-") || f.starts_with('.'));
    assert_eq!(
        names.len(),
        n - killed.len(),
        "no output for the lost members: {names:?}"
    );
    for i in (0..n).filter(|i| !killed.contains(i)) {
        windrose()
            .args(["group", "leave", "--control", s(&socket(i))])
            .timeout(Duration::from_secs(60))
            .assert()
            .success();
    }
}
