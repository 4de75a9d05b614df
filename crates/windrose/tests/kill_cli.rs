//! Node processes that die or hang in the middle of a real run on loopback (issue 8), through
//! `windrose local`: receivers killed with SIGKILL during a MOB multicast, a relay killed during
//! a chain broadcast, receivers stopped with SIGSTOP during a MOB multicast. Every other node
//! must finish with the root's bytes (BLAKE3 checked by the root), the victims must be reported
//! failed with a reason, the run must end (no hang), and nothing may be left under a victim's
//! final file name.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long any wait of these tests may take.
const BOUND: Duration = Duration::from_secs(120);

/// `windrose local ARGS --json --quiet --out-dir DIR`, started.
fn local(args: &[&str], dir: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_windrose"))
        .arg("local")
        .args(args)
        .args(["--json", "--quiet", "--out-dir"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The pid of the node process writing `.node-I.bin.windrose-partial-PID-NONCE` in `dir`, once
/// that file holds at least `min_bytes`.
fn writer_of(dir: &Path, node: u32, min_bytes: u64) -> Option<i32> {
    let prefix = format!(".node-{node}.bin.windrose-partial-");
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(rest) = name.strip_prefix(&prefix) {
            if e.metadata().ok()?.len() >= min_bytes {
                return rest.split('-').next()?.parse().ok();
            }
        }
    }
    None
}

/// Waits until every victim holds `min_bytes`, then sends each `signal`; returns their pids.
fn signal_when_holding(dir: &Path, victims: &[u32], min_bytes: u64, signal: i32) -> Vec<i32> {
    let deadline = Instant::now() + BOUND;
    let mut pids = Vec::new();
    while pids.len() < victims.len() {
        pids = victims
            .iter()
            .filter_map(|&v| writer_of(dir, v, min_bytes))
            .collect();
        assert!(
            Instant::now() < deadline,
            "the victims never received {min_bytes} bytes"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    for &pid in &pids {
        // SAFETY: kill(2) of a node process this test started (through `windrose local`).
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }
    pids
}

/// The root's per-node results, checked: `local` exits with an error (nodes failed), every
/// victim is reported not finished with a reason containing `why` and left no file under its
/// final name, every other node finished with `bytes` verified bytes.
fn check_result(child: Child, dir: &Path, nodes: usize, victims: &[u32], bytes: u64, why: &str) {
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "nodes failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}; {stderr}", String::from_utf8_lossy(&out.stdout)));
    let results = v["nodes"].as_array().unwrap();
    assert_eq!(results.len(), nodes - 1);
    for n in results {
        let id = n["node"].as_u64().unwrap() as u32;
        if victims.contains(&id) {
            assert_ne!(n["status"], "finished", "{n}");
            let e = n["error"].as_str().unwrap_or_default();
            assert!(
                !e.is_empty() && e.contains(why),
                "node {id} (expected {why:?}): {n}"
            );
            assert!(!dir.join(format!("node-{id}.bin")).exists());
        } else {
            assert_eq!(n["status"], "finished", "{n}");
            assert_eq!(n["verified"], true, "{n}");
            assert_eq!(n["bytes_received"], bytes, "{n}");
        }
    }
}

#[test]
fn two_receivers_killed_mid_mob_the_others_complete_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--nodes",
        "16",
        "--clusters",
        "4",
        "--protocol",
        "mob",
        "--size",
        "256MiB",
    ];
    let child = local(&args, dir.path());
    let victims = [5u32, 9];
    signal_when_holding(dir.path(), &victims, 8 << 20, libc::SIGKILL);
    // "node 5 closed the connection", "connection reset by peer", ...
    check_result(child, dir.path(), 16, &victims, 256 << 20, "");
}

/// A relay of a chain broadcast killed with SIGKILL mid-run: its subtree re-attaches to the
/// root, which resends from the first segment the orphan misses; every other node finishes
/// with the root's bytes.
#[test]
fn a_relay_killed_mid_broadcast_its_subtree_reattaches_and_completes() {
    let dir = tempfile::tempdir().unwrap();
    let child = local(
        &["--nodes", "8", "--tree", "chain", "--size", "256MiB"],
        dir.path(),
    );
    let victims = [3u32];
    signal_when_holding(dir.path(), &victims, 8 << 20, libc::SIGKILL);
    check_result(child, dir.path(), 8, &victims, 256 << 20, "");
}

/// Two receivers stopped with SIGSTOP in the middle of a MOB multicast: they keep their
/// connections open but say nothing, not even to the link probes' pings. Their peers and the
/// root declare them failed after the silence timeout, the others finish with the root's bytes,
/// and the run ends without waiting for them.
#[test]
fn two_receivers_stopped_mid_mob_are_declared_failed_the_others_complete() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--nodes",
        "8",
        "--clusters",
        "2",
        "--protocol",
        "mob",
        "--size",
        "128MiB",
    ];
    let child = local(&args, dir.path());
    let victims = [3u32, 6];
    let pids = signal_when_holding(dir.path(), &victims, 4 << 20, libc::SIGSTOP);
    // The others finish (their files appear under the final names): MOB's acknowledgement
    // tree let them, so every node had given the stopped ones up, and their connections are
    // open: only the silence tells. Then the stopped ones are killed for `local` to reap.
    let deadline = Instant::now() + BOUND;
    let others: Vec<u32> = (1..8).filter(|i| !victims.contains(i)).collect();
    while !others
        .iter()
        .all(|i| dir.path().join(format!("node-{i}.bin")).exists())
    {
        assert!(Instant::now() < deadline, "the others did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    for &pid in &pids {
        // SAFETY: kill(2) of a node process this test started.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    check_result(child, dir.path(), 8, &victims, 128 << 20, "sent nothing");
}
