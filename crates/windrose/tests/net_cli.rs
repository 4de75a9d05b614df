//! The real-network commands as a user runs them: `windrose local` (8 processes on loopback),
//! `windrose node` + `windrose bcast` started separately, and their errors.

#[path = "support/procs.rs"]
mod procs;

use predicates::prelude::*;
use procs::{
    check_nodes, free_port, free_ports, hash_file, spawn_node, spawn_nodes, windrose, write_group,
};
use std::time::{Duration, Instant};

/// `windrose local --nodes N --clusters 2 --size 64MiB --json` with these extra arguments;
/// returns the parsed outcome.
fn local(nodes: usize, args: &[&str]) -> serde_json::Value {
    let n = nodes.to_string();
    let mut all = vec!["--nodes", &n, "--clusters", "2", "--size", "64MiB"];
    all.extend(args);
    procs::local_json(&all)
}

#[test]
fn eight_processes_broadcast_64_mib_over_every_tree() {
    for tree in ["mst", "magpie", "binomial", "balanced-path", "chain"] {
        let o = local(8, &["--tree", tree, "--seed", "5"]);
        let root = o["root_blake3"].as_str().unwrap();
        let nodes = o["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 7, "{tree}");
        for n in nodes {
            assert_eq!(n["status"], "finished", "{tree}: {n}");
            assert_eq!(n["blake3"].as_str(), Some(root), "{tree}: {n}");
            assert_eq!(n["verified"], true);
            assert_eq!(n["bytes_received"], 64 << 20);
        }
    }
}

#[test]
fn size_flags_are_decimal_mb_and_binary_mib() {
    for (size, bytes) in [("64MB", 64_000_000u64), ("64MiB", 67_108_864)] {
        let o = procs::local_json(&[
            "--nodes",
            "2",
            "--clusters",
            "1",
            "--size",
            size,
            "--segment",
            "4MB",
            "--tree",
            "chain",
        ]);
        let nodes = o["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 1, "{o}");
        assert_eq!(nodes[0]["status"], "finished", "{o}");
        assert_eq!(nodes[0]["bytes_received"], bytes, "--size {size}");
    }
    windrose()
        .args(["local", "--size", "64mb"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown unit \"mb\""));
}

#[test]
fn local_keeps_the_received_files_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("payload.bin");
    std::fs::write(
        &data,
        (0..3_000_000u32)
            .map(|i| (i * 7 % 251) as u8)
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let out_dir = dir.path().join("run");
    let o = local(
        4,
        &[
            "--file",
            data.to_str().unwrap(),
            "--out-dir",
            out_dir.to_str().unwrap(),
            "--tree",
            "chain",
            "--segment",
            "256KiB",
        ],
    );
    let want = hash_file(&data);
    assert_eq!(o["root_blake3"], want.as_str());
    for i in 1..4 {
        assert_eq!(
            hash_file(&out_dir.join(format!("node-{i}.bin"))),
            want,
            "node {i}"
        );
    }
    assert!(out_dir.join("group.toml").exists());
    // Only complete files: no temporary ones left.
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
    assert_eq!(partial, 0);
}

#[test]
fn node_and_bcast_as_separate_commands() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    write_group(&group, "lab-bcast", &free_ports(3));
    let data = dir.path().join("data.bin");
    std::fs::write(&data, vec![42u8; 5_000_000]).unwrap();
    let (outs, nodes) = spawn_nodes(&group, dir.path(), 2);
    windrose()
        .args([
            "bcast",
            "--group",
            group.to_str().unwrap(),
            "--file",
            data.to_str().unwrap(),
        ])
        .args(["--tree", "magpie", "--segment", "1MiB"])
        .timeout(Duration::from_secs(60))
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "all 2 nodes received the root's bytes",
        ))
        .stdout(predicate::str::contains("ok"));
    check_nodes(nodes, &outs, &data, 5_000_000);
}

#[test]
fn unreachable_node_fails_fast_with_its_address() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    // Node 2 on an address no test listens on, so its port cannot be taken meanwhile.
    let addrs = [
        free_port(),
        free_port(),
        format!("127.0.0.253:{}", free_port()),
    ];
    write_group(&group, "lab-unreachable", &addrs);
    let data = dir.path().join("data.bin");
    std::fs::write(&data, b"hello").unwrap();
    let node1 = spawn_node(&group, 1, &dir.path().join("got.bin"));
    let started = Instant::now();
    windrose()
        .args([
            "bcast",
            "--group",
            group.to_str().unwrap(),
            "--file",
            data.to_str().unwrap(),
        ])
        .args(["--connect-timeout", "1.5", "--quiet"])
        .timeout(Duration::from_secs(30))
        .assert()
        .code(1)
        .stderr(predicate::str::contains(format!(
            "node 2 at {} is unreachable",
            addrs[2]
        )));
    assert!(started.elapsed() < Duration::from_secs(20));
    // The group goes on without the unreachable member: node 1 gets the data.
    let out = node1.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(dir.path().join("got.bin")).unwrap(), b"hello");
}

#[test]
fn bad_group_files_and_arguments_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    std::fs::write(
        &group,
        "name = \"lab\"\nprotocol_version = 2\n[[node]]\nid = 0\naddr = \"127.0.0.1:x\"\n",
    )
    .unwrap();
    windrose()
        .args(["node", "--group", group.to_str().unwrap(), "--id", "0"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "group.toml:5:8: address \"127.0.0.1:x\"",
        ));
    write_group(&group, "lab-args", &[free_port(), free_port()]);
    windrose()
        .args(["node", "--group", group.to_str().unwrap(), "--id", "5"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--id 5"));
    windrose()
        .args(["local", "--nodes", "1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--nodes 1"));
    windrose()
        .args(["local", "--segment", "lots"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("\"lots\" is not a byte size"));
    windrose()
        .args([
            "local",
            "--protocol",
            "bittorrent",
            "--mob-variant",
            "paper",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--mob-variant is only used by MOB (--protocol mob), not bittorrent",
        ));
    windrose()
        .args(["local", "--protocol", "mob", "--mob-variant", "papr"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("papr"));
    // Encryption takes its keys from the authenticated handshake: no key, no --encrypt.
    windrose()
        .args([
            "node",
            "--group",
            group.to_str().unwrap(),
            "--id",
            "1",
            "--encrypt",
        ])
        .env_remove("WINDROSE_GROUP_KEY")
        .env_remove("WINDROSE_GROUP_KEY_FILE")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--encrypt needs a group key"));
}

/// `local --encrypt`: every node process runs with the encrypted data path (its own key, made
/// for the run), and every byte checks out.
#[test]
fn local_with_an_encrypted_data_path() {
    let o = local(4, &["--encrypt", "--tree", "chain", "--seed", "2"]);
    let root = o["root_blake3"].as_str().unwrap();
    for n in o["nodes"].as_array().unwrap() {
        assert_eq!(n["status"], "finished", "{n}");
        assert_eq!(n["blake3"].as_str(), Some(root), "{n}");
        assert_eq!(n["verified"], true);
    }
}

/// Seed 002's own MOB (random pieces, 5 requests per peer) runs on real processes too, so
/// `testbed run --mob-variant paper` can measure it on emulated links.
#[test]
fn local_runs_the_papers_mob() {
    let o = local(6, &["--protocol", "mob", "--mob-variant", "paper"]);
    let root = o["root_blake3"].as_str().unwrap();
    assert_eq!(o["nodes"].as_array().unwrap().len(), 5, "{o}");
    for n in o["nodes"].as_array().unwrap() {
        assert_eq!(n["status"], "finished", "{n}");
        assert_eq!(n["blake3"].as_str(), Some(root), "{n}");
    }
}

/// Checks a scatter's JSON outcome: every node finished with the share the root expected, the
/// kept shares partition the load, and every node has a predicted and a measured finish.
fn check_scatter(o: &serde_json::Value, nodes: usize, load: u64) {
    assert_eq!(o["collective"], "scatter");
    let predicted = o["prediction"]["predicted_finish_s"].as_f64().unwrap();
    assert!(predicted > 0.0, "{o}");
    assert!(o["root_measured_finish_s"].as_f64().unwrap() > 0.0);
    let mut shares = vec![(
        o["root_share"]["offset"].as_u64().unwrap(),
        o["root_share"]["len"].as_u64().unwrap(),
    )];
    let list = o["nodes"].as_array().unwrap();
    assert_eq!(list.len(), nodes - 1);
    for n in list {
        assert_eq!(n["status"], "finished", "{n}");
        assert_eq!(n["verified"], true, "{n}");
        assert!(n["measured_finish_s"].as_f64().unwrap() > 0.0, "{n}");
        assert!(
            (n["predicted_finish_s"].as_f64().unwrap() - predicted).abs() < 1e-9 * predicted,
            "the schedule predicts one finish time for all: {n}"
        );
        shares.push((
            n["share"]["offset"].as_u64().unwrap(),
            n["share"]["len"].as_u64().unwrap(),
        ));
    }
    shares.sort();
    let mut next = 0;
    for (offset, len) in shares {
        assert_eq!(offset, next, "the kept shares partition the load");
        next += len;
    }
    assert_eq!(next, load);
}

#[test]
fn local_scatter_predicts_and_measures_every_node() {
    let o = procs::local_json(&[
        "--scatter",
        "--nodes",
        "6",
        "--clusters",
        "2",
        "--size",
        "8MiB",
        "--tree",
        "binomial",
    ]);
    check_scatter(&o, 6, 8 << 20);
    // On loopback both speeds are measured before the run.
    let p = &o["prediction"];
    assert_eq!(p["calibrated"], true, "{p}");
    assert!(p["hash_mb_s"].as_f64().unwrap() > 0.0);
    assert!(p["link_mb_s"].as_f64().unwrap() > 0.0);
    assert_eq!(o["schedule"]["nodes"].as_array().unwrap().len(), 6);
}

#[test]
fn scatter_and_nodes_as_separate_commands_with_a_speeds_file() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    write_group(
        &group,
        "lab-scatter",
        &[free_port(), free_port(), free_port(), free_port()],
    );
    // A flat tree: node 0 sends to 1, 2 and 3.
    let speeds = dir.path().join("speeds.toml");
    std::fs::write(
        &speeds,
        "[compute_s_per_unit]\n0 = 1.0\n1 = 2.0\n2 = 1.0\n3 = 4.0\n\
         [link_s_per_unit]\n1 = 0.5\n2 = 0.2\n0-3 = 0.1\n",
    )
    .unwrap();
    let data = dir.path().join("load.bin");
    std::fs::write(
        &data,
        (0..3_000_001u32)
            .map(|i| (i * 13 % 251) as u8)
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let (outs, nodes) = spawn_nodes(&group, dir.path(), 3);
    let out = windrose()
        .args(["scatter", "--group", group.to_str().unwrap()])
        .args(["--file", data.to_str().unwrap()])
        .args(["--tree", "flat", "--speeds", speeds.to_str().unwrap()])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("not calibrated"), "{stdout}");
    assert!(stdout.contains("predicted_s"), "{stdout}");
    assert!(stdout.contains("measured_s"), "{stdout}");
    assert!(
        stdout.contains("all 3 nodes computed the BLAKE3 of their shares"),
        "{stdout}"
    );
    for n in nodes {
        let out = n.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("computed its share"));
    }
    // A scatter delivers nothing to write: no output files, complete or partial.
    for o in &outs {
        assert!(!o.exists(), "{}", o.display());
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
}

#[test]
fn scatter_arguments_are_checked_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    write_group(&group, "lab-scatter-args", &[free_port(), free_port()]);
    let speeds = dir.path().join("speeds.toml");
    std::fs::write(
        &speeds,
        "[compute_s_per_unit]\n0 = 1.0\n[link_s_per_unit]\n",
    )
    .unwrap();
    // Nobody runs node 1: every error is found before the root connects.
    windrose()
        .args(["scatter", "--group", group.to_str().unwrap()])
        .args(["--load-size", "1MiB", "--speeds", speeds.to_str().unwrap()])
        .timeout(Duration::from_secs(30))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("speeds.toml"))
        .stderr(predicate::str::contains("node 1"));
    windrose()
        .args(["scatter", "--group", group.to_str().unwrap()])
        .args(["--load-size", "1MiB", "--hash-mb-s", "0"])
        .timeout(Duration::from_secs(30))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--hash-mb-s 0"));
    windrose()
        .args(["local", "--speeds", speeds.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("add --scatter"));
    windrose()
        .args(["local", "--scatter", "--segment", "1MiB"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--segment"));
}

/// `windrose node` without `--once` stays in the group: three root commands in a row (each
/// root joining for its run and leaving) all reach it, then it leaves when told to.
#[test]
fn a_long_lived_node_serves_root_after_root_until_told_to_leave() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    write_group(&group, "lab-long-lived", &[free_port(), free_port()]);
    let data = dir.path().join("data.bin");
    std::fs::write(&data, vec![7u8; 300_000]).unwrap();
    let g = group.to_str().unwrap();
    /// Kills the node if the test fails before it leaves.
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut node = Reap(
        std::process::Command::new(assert_cmd::cargo::cargo_bin("windrose"))
            .args(["node", "--group", g, "--id", "1", "--quiet"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let socket = std::env::temp_dir().join("windrose-lab-long-lived-1.sock");
    procs::wait_for("node 1's control socket", Duration::from_secs(60), || {
        socket.exists()
    });
    for kind in [
        &["bcast"][..],
        &["bcast"],
        &["multicast", "--protocol", "mob"],
    ] {
        windrose()
            .args(kind)
            .args(["--group", g, "--file", data.to_str().unwrap(), "--quiet"])
            .timeout(Duration::from_secs(120))
            .assert()
            .success();
    }
    assert!(node.0.try_wait().unwrap().is_none(), "node 1 left early");
    windrose()
        .args(["group", "leave", "--group", g, "--id", "1"])
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = node.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "node 1 did not leave");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
}

/// `local --measurements` writes every node's link series, not the root's alone: one entry per
/// node, each with the round trips that node measured to its peers.
#[test]
fn local_measurements_hold_every_nodes_series() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.json");
    windrose()
        .args(["local", "--nodes", "3", "--size", "4MiB", "--quiet"])
        .arg("--measurements")
        .arg(&file)
        .timeout(Duration::from_secs(120))
        .assert()
        .success();
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let nodes: Vec<u64> = m
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            let series = entry["series"].as_array().unwrap();
            assert!(!series.is_empty(), "{entry}");
            series[0]["node"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(nodes, vec![0, 1, 2], "{m}");
}
