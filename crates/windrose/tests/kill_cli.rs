//! Receivers killed with SIGKILL in the middle of a real multicast (issue 8): 16 processes on
//! loopback in 4 clusters, MOB of 256 MiB; once two receivers hold part of the data they are
//! killed; the 13 others must finish with the root's bytes (BLAKE3 checked by the root), the two
//! must be reported failed with a reason, the run must end (no hang), and nothing may be left
//! under a killed node's final file name.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

#[test]
fn two_receivers_killed_mid_mob_the_others_complete_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_windrose"))
        .args([
            "local",
            "--nodes",
            "16",
            "--clusters",
            "4",
            "--protocol",
            "mob",
            "--size",
            "256MiB",
            "--json",
            "--quiet",
            "--out-dir",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let victims = [5u32, 9];
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut pids = Vec::new();
    while pids.len() < victims.len() {
        pids = victims
            .iter()
            .filter_map(|&v| writer_of(dir.path(), v, 8 << 20))
            .collect();
        assert!(
            Instant::now() < deadline,
            "the victims never received 8 MiB"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for &pid in &pids {
        // SAFETY: kill(2) of a node process this test started (through `windrose local`).
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "two nodes failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}; {stderr}", String::from_utf8_lossy(&out.stdout)));
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 15);
    for n in nodes {
        let id = n["node"].as_u64().unwrap() as u32;
        if victims.contains(&id) {
            assert_ne!(n["status"], "finished", "{n}");
            assert!(!n["error"].is_null(), "a reason for node {id}: {n}");
            assert!(!dir.path().join(format!("node-{id}.bin")).exists());
        } else {
            assert_eq!(n["status"], "finished", "{n}");
            assert_eq!(n["verified"], true, "{n}");
            assert_eq!(n["bytes_received"], 256u64 << 20, "{n}");
        }
    }
}

/// A relay of a chain broadcast killed with SIGKILL mid-run (issue 8): its subtree re-attaches
/// to the root, which resends from the first segment the orphan misses; every other node
/// finishes with the root's bytes.
#[test]
fn a_relay_killed_mid_broadcast_its_subtree_reattaches_and_completes() {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_windrose"))
        .args([
            "local",
            "--nodes",
            "8",
            "--tree",
            "chain",
            "--size",
            "256MiB",
            "--json",
            "--quiet",
            "--out-dir",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let victim = 3u32;
    let deadline = Instant::now() + Duration::from_secs(120);
    let pid = loop {
        if let Some(pid) = writer_of(dir.path(), victim, 8 << 20) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the victim never received 8 MiB");
        std::thread::sleep(Duration::from_millis(5));
    };
    // SAFETY: kill(2) of a node process this test started (through `windrose local`).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "one node failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}; {stderr}", String::from_utf8_lossy(&out.stdout)));
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 7);
    for n in nodes {
        let id = n["node"].as_u64().unwrap() as u32;
        if id == victim {
            assert_ne!(n["status"], "finished", "{n}");
            assert!(!dir.path().join(format!("node-{id}.bin")).exists());
        } else {
            assert_eq!(n["status"], "finished", "{n}");
            assert_eq!(n["verified"], true, "{n}");
            assert_eq!(n["bytes_received"], 256u64 << 20, "{n}");
        }
    }
}

/// Two receivers stopped with SIGSTOP in the middle of a MOB multicast (issue 8): they keep
/// their connections open but say nothing, not even to the link probes' pings. Their peers and
/// the root declare them failed after the silence timeout, the others finish with the root's
/// bytes, and the run ends without waiting for them.
#[test]
fn two_receivers_stopped_mid_mob_are_declared_failed_the_others_complete() {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_windrose"))
        .args([
            "local",
            "--nodes",
            "8",
            "--clusters",
            "2",
            "--protocol",
            "mob",
            "--size",
            "128MiB",
            "--json",
            "--quiet",
            "--out-dir",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let victims = [3u32, 6];
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut pids = Vec::new();
    while pids.len() < victims.len() {
        pids = victims
            .iter()
            .filter_map(|&v| writer_of(dir.path(), v, 4 << 20))
            .collect();
        assert!(
            Instant::now() < deadline,
            "the victims never received 4 MiB"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    for &pid in &pids {
        // SAFETY: kill(2) of a node process this test started (through `windrose local`).
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    }
    // The others finish (their files appear under the final names); then the stopped ones are
    // killed so that `windrose local` can reap them.
    let others: Vec<u32> = (1..8).filter(|i| !victims.contains(i)).collect();
    while !others
        .iter()
        .all(|i| dir.path().join(format!("node-{i}.bin")).exists())
    {
        assert!(Instant::now() < deadline, "the others did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    // MOB's acknowledgement tree let them finish, so every node had given the stopped ones
    // up (their connections are open: only the silence tells).
    for &pid in &pids {
        // SAFETY: as above.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "two nodes failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}; {stderr}", String::from_utf8_lossy(&out.stdout)));
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 7);
    for n in nodes {
        let id = n["node"].as_u64().unwrap() as u32;
        if victims.contains(&id) {
            assert_ne!(n["status"], "finished", "{n}");
            let e = n["error"].as_str().unwrap_or_default();
            assert!(e.contains("sent nothing"), "node {id}: {n}");
        } else {
            assert_eq!(n["status"], "finished", "{n}");
            assert_eq!(n["verified"], true, "{n}");
        }
    }
}
