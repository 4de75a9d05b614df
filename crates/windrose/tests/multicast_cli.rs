//! The piece-based multicasts as a user runs them: `windrose local --protocol P` (processes on
//! loopback), `windrose node` + `windrose multicast` started separately, and their errors.

#[path = "support/procs.rs"]
mod procs;

use procs::{check_nodes, free_ports, hash_file, spawn_nodes, windrose, write_group};
use std::path::Path;
use std::process::Child;
use std::time::Duration;

const PROTOCOLS: [&str; 4] = ["magpie", "balanced", "mob", "bittorrent"];

/// `windrose local --nodes N --clusters 2 --protocol P --json` with these extra arguments: the
/// parsed outcome.
fn local(protocol: &str, nodes: usize, args: &[&str]) -> serde_json::Value {
    let n = nodes.to_string();
    let mut all = vec!["--nodes", &n, "--clusters", "2", "--protocol", protocol];
    all.extend(args);
    procs::local_json(&all)
}

#[test]
fn local_runs_every_multicast_and_every_node_checks_out() {
    for protocol in PROTOCOLS {
        let o = local(
            protocol,
            8,
            &["--size", "6MiB", "--piece", "128KiB", "--seed", "3"],
        );
        assert_eq!(o["collective"], "multicast", "{protocol}");
        assert_eq!(o["protocol"], protocol);
        assert_eq!(o["piece_bytes"], 128 << 10);
        let root = o["root_blake3"].as_str().unwrap();
        let nodes = o["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 7, "{protocol}");
        for n in nodes {
            assert_eq!(n["status"], "finished", "{protocol}: {n}");
            assert_eq!(n["blake3"].as_str(), Some(root), "{protocol}: {n}");
            assert_eq!(n["verified"], true);
            assert_eq!(n["bytes_received"], 6 << 20);
            assert!(n["completion_s"].as_f64().unwrap() > 0.0, "{protocol}: {n}");
            assert!(
                n["throughput_mb_s"].as_f64().unwrap() > 0.0,
                "{protocol}: {n}"
            );
        }
        match protocol {
            "balanced" => {
                assert_eq!(o["plan"]["from_platform"], false);
                assert!(o["plan"]["planned_mb_s"].as_f64().unwrap() > 0.0);
                assert!(o["plan"]["basis"]
                    .as_str()
                    .unwrap()
                    .contains("equal capacities"));
            }
            "magpie" => assert_eq!(o["plan"]["trees"], 1),
            _ => assert!(o["plan"].is_null(), "{protocol}: {o}"),
        }
    }
}

#[test]
fn local_multicast_keeps_the_received_files_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("payload.bin");
    std::fs::write(
        &data,
        (0..3_000_001u32)
            .map(|i| (i * 13 % 251) as u8)
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    for protocol in PROTOCOLS {
        let out_dir = dir.path().join(format!("run-{protocol}"));
        let o = local(
            protocol,
            5,
            &[
                "--file",
                data.to_str().unwrap(),
                "--out-dir",
                out_dir.to_str().unwrap(),
                "--piece",
                "100000",
            ],
        );
        let want = hash_file(&data);
        assert_eq!(o["root_blake3"], want.as_str());
        for i in 1..5 {
            assert_eq!(
                hash_file(&out_dir.join(format!("node-{i}.bin"))),
                want,
                "{protocol}: node {i}"
            );
        }
        let partial = std::fs::read_dir(&out_dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .contains("partial")
            })
            .count();
        assert_eq!(partial, 0, "{protocol}");
    }
}

/// A `[platform]` of two clusters of `a` and `b` nodes, the WAN from cluster 0 to 1 slow.
fn write_platform(path: &Path, a: usize, b: usize) {
    let cluster = |n: usize| {
        format!(
            "[[platform.cluster]]\nnodes = {n}\nnode_uplink_bytes_s = 1.25e8\n\
             node_downlink_bytes_s = 1.25e8\naccess_up_bytes_s = 1.25e9\n\
             access_down_bytes_s = 1.25e9\nintra_latency_s = 1e-4\n"
        )
    };
    let text = format!(
        "[platform]\n{}{}[platform.wan]\nbytes_s = [[0, 5e7], [5e7, 0]]\n\
         latency_s = [[0, 0.005], [0.005, 0]]\n",
        cluster(a),
        cluster(b)
    );
    std::fs::write(path, text).unwrap();
}

#[test]
fn node_and_multicast_as_separate_commands_with_a_platform() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    write_group(&group, "lab-multicast", &free_ports(5));
    let platform = dir.path().join("platform.toml");
    // Clusters 0 (nodes 0, 2, 4) and 1 (nodes 1, 3).
    write_platform(&platform, 3, 2);
    let data = dir.path().join("data.bin");
    std::fs::write(&data, vec![7u8; 4_000_000]).unwrap();
    let (outs, nodes) = spawn_nodes(&group, dir.path(), 4);
    let out = windrose()
        .args([
            "multicast",
            "--protocol",
            "balanced",
            "--group",
            group.to_str().unwrap(),
            "--file",
            data.to_str().unwrap(),
            "--platform",
            platform.to_str().unwrap(),
            "--piece",
            "256KiB",
        ])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "balanced multicast of".to_string(),
        format!("capacities from {}", platform.display()),
        "all 4 nodes received the root's bytes".to_string(),
    ] {
        assert!(stdout.contains(&want), "{want:?} not in {stdout}");
    }
    check_nodes(nodes, &outs, &data, 4_000_000);
}

#[test]
fn bad_multicast_arguments_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    write_group(&group, "lab-bad", &free_ports(3));
    let data = dir.path().join("data.bin");
    std::fs::write(&data, b"hello").unwrap();
    let g = group.to_str().unwrap();
    let d = data.to_str().unwrap();
    // The error on one line (clap adds a hint line after its own usage errors).
    let one_line = |out: &std::process::Output, want: &str| {
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap_or_default();
        assert!(first.starts_with("error: "), "{err}");
        assert!(
            first.contains(want),
            "{want:?} not in the first line of {err}"
        );
    };
    let run = |args: &[&str]| windrose().args(args).output().unwrap();
    one_line(
        &run(&[
            "multicast",
            "--protocol",
            "flood",
            "--group",
            g,
            "--file",
            d,
        ]),
        "unknown multicast protocol \"flood\"",
    );
    one_line(
        &run(&["local", "--protocol", "flood"]),
        "expected broadcast, mob, bittorrent, balanced or magpie",
    );
    one_line(
        &run(&[
            "multicast",
            "--protocol",
            "mob",
            "--group",
            g,
            "--file",
            d,
            "--piece",
            "0",
        ]),
        "--piece 0",
    );
    one_line(
        &run(&[
            "multicast",
            "--protocol",
            "mob",
            "--group",
            g,
            "--file",
            d,
            "--piece",
            "1GiB",
        ]),
        "--piece 1073741824",
    );
    one_line(
        &run(&["local", "--piece", "1MiB"]),
        "multicast options: add --protocol",
    );
    one_line(
        &run(&["local", "--protocol", "mob", "--scatter"]),
        "exclude each other",
    );
    one_line(
        &run(&["local", "--protocol", "mob", "--platform", "x.toml"]),
        "only used by --protocol balanced",
    );
    // A platform whose clusters do not match the group's (3 + 0 vs 2 + 1).
    let platform = dir.path().join("platform.toml");
    write_platform(&platform, 1, 2);
    one_line(
        &run(&[
            "multicast",
            "--protocol",
            "balanced",
            "--group",
            g,
            "--file",
            d,
            "--platform",
            platform.to_str().unwrap(),
        ]),
        "the platform's clusters have [1, 2] nodes, the group's [2, 1]",
    );
    one_line(
        &run(&[
            "multicast",
            "--protocol",
            "balanced",
            "--group",
            g,
            "--file",
            d,
            "--platform",
            dir.path().join("missing.toml").to_str().unwrap(),
        ]),
        "missing.toml",
    );
}

/// The heap (RssAnon) of a live process, in bytes; None once it has exited.
fn heap_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

/// A multicast receiver with an output file keeps the pieces it must serve to its peers in that
/// file (mapped), not on its heap: during a MOB multicast of 256 MiB to four receivers, none of
/// them has more than 96 MiB of heap at any sample (with the pieces on the heap each reached
/// 256 MiB), and every file equals the data.
#[test]
fn receivers_keep_the_pieces_in_their_files_not_on_the_heap() {
    const SIZE: usize = 256 << 20;
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    write_group(&group, "lab-heap", &free_ports(5));
    let data = dir.path().join("data.bin");
    let payload: Vec<u8> = (0..SIZE as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    std::fs::write(&data, &payload).unwrap();
    drop(payload);
    let (outs, nodes) = spawn_nodes(&group, dir.path(), 4);
    let pids: Vec<u32> = nodes.iter().map(Child::id).collect();
    let mut root = std::process::Command::new(assert_cmd::cargo::cargo_bin("windrose"))
        .args(["multicast", "--protocol", "mob", "--group"])
        .arg(&group)
        .arg("--file")
        .arg(&data)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut peak = 0u64;
    let status = loop {
        for &p in &pids {
            peak = peak.max(heap_bytes(p).unwrap_or(0));
        }
        if let Some(s) = root.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "the multicast hung");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "the root failed");
    assert!(
        peak < 96 << 20,
        "a receiver's heap reached {} MiB for 256 MiB of data",
        peak >> 20
    );
    assert!(peak > 0, "no receiver was ever sampled");
    check_nodes(nodes, &outs, &data, SIZE as u64);
}
