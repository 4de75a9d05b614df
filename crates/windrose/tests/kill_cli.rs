//! Node processes that die or hang in the middle of a real run on loopback (issue 8), through
//! `windrose local`: receivers killed with SIGKILL during a MOB multicast, a relay killed during
//! a chain broadcast, receivers stopped with SIGSTOP during a MOB multicast. Every other node
//! must finish with the root's bytes (BLAKE3 checked by the root), the victims must be reported
//! failed with a reason, the run must end (no hang), and nothing may be left under a victim's
//! final file name.

#[path = "support/procs.rs"]
mod procs;

use procs::bytes_held;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use windrose_net::Timeouts;

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
            if min_bytes == 0 || bytes_held(&e.path()) >= min_bytes {
                return rest.split('-').next()?.parse().ok();
            }
        }
    }
    None
}

/// When [`signal_when_holding`] signals its victims.
#[derive(Copy, Clone, Debug)]
enum Holding {
    /// Once every victim holds this many bytes: nodes that progress together (a swarm).
    Each(u64),
    /// Once the first victim holds this many bytes, whatever the others hold: nodes of a chain,
    /// where one above the others may run arbitrarily far ahead (a relay keeps reading while
    /// its child is slow), so that waiting for the last could find the first holding
    /// everything.
    First(u64),
}

/// Waits until the victims hold what `when` says, then sends each `signal`; returns their
/// pids.
fn signal_when_holding(dir: &Path, victims: &[u32], when: Holding, signal: i32) -> Vec<i32> {
    let deadline = Instant::now() + BOUND;
    let pids = loop {
        let (each, first) = match when {
            Holding::Each(b) => (b, b),
            Holding::First(b) => (0, b),
        };
        let pids: Vec<i32> = victims
            .iter()
            .filter_map(|&v| writer_of(dir, v, each))
            .collect();
        if pids.len() == victims.len()
            && victims.iter().any(|&v| writer_of(dir, v, first).is_some())
        {
            break pids;
        }
        assert!(
            Instant::now() < deadline,
            "the victims never held what {when:?} asks"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
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
    signal_when_holding(dir.path(), &victims, Holding::Each(8 << 20), libc::SIGKILL);
    // "node 5 closed the connection", "connection reset by peer", ...
    check_result(child, dir.path(), 16, &victims, 256 << 20, "");
}

/// Starts `windrose node --once` again (as `local` starts its nodes) for `node` of the group
/// `local` wrote to `dir`, with the run's key file and the same output file.
fn restart_node(dir: &Path, key: &Path, node: u32) -> Child {
    Command::new(env!("CARGO_BIN_EXE_windrose"))
        .args([
            "node",
            "--once",
            "--id",
            &node.to_string(),
            "--wait",
            "60",
            "--json",
            "--group",
        ])
        .arg(dir.join("group.toml"))
        .arg("--out")
        .arg(dir.join(format!("node-{node}.bin")))
        .arg("--key-file")
        .arg(key)
        .env_remove("WINDROSE_GROUP_KEY")
        .env_remove("WINDROSE_GROUP_KEY_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (at most `BOUND`) until `done` holds.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !done() {
        assert!(Instant::now() < deadline, "waited too long for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `windrose local ARGS` over `mib` MiB of a known file with a group key, kills
/// `restarted` and `dead` with SIGKILL once the three victims hold what `kill_at` says, starts
/// `restarted` again
/// at once, and checks: it finishes with the root's bytes (its file equals the data, the root
/// verified its hash) having resumed at least `min_resumed` bytes from disk; `dead` is reported
/// failed; every other node finishes and verifies; no partial file is left.
///
/// The run must still be going when the restarted node comes back, however fast the rest of
/// it is on this machine: a third node, `held`, is stopped with SIGSTOP just before the kills
/// (the root waits for its report, so the run cannot end) and continued with SIGCONT once the
/// root has taken the restarted node back (its new process's partial file holds data the
/// earlier life's did not). The hold
/// lasts about the new process's start-up, far below the silence timeout (10 s) after which
/// `held` would be given up.
fn kill_and_restart(
    args: &[&str],
    mib: u32,
    kill_at: Holding,
    [restarted, dead, held]: [u32; 3],
    min_resumed: u64,
) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("group.key");
    let keygen = Command::new(env!("CARGO_BIN_EXE_windrose"))
        .arg("keygen")
        .arg("--out")
        .arg(&key)
        .output()
        .unwrap();
    assert!(keygen.status.success(), "{keygen:?}");
    let data = dir.path().join("data.bin");
    let payload: Vec<u8> = (0..mib << 20)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&data, &payload).unwrap();
    let out = dir.path().join("out");
    let mut all: Vec<&str> = args.to_vec();
    all.extend([
        "--file",
        data.to_str().unwrap(),
        "--key-file",
        key.to_str().unwrap(),
    ]);
    let child = local(&all, &out);
    let held_pid = signal_when_holding(&out, &[restarted, dead, held], kill_at, libc::SIGSTOP);
    for &pid in &held_pid[..2] {
        // SAFETY: kill(2) of node processes this test started (through `windrose local`).
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    }
    let kept = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(&format!(
                ".node-{restarted}.bin.windrose-partial-{}-",
                held_pid[0]
            ))
        })
        .map(|e| bytes_held(&e.path()))
        .max()
        .unwrap_or(0);
    assert!(
        kept < u64::from(mib) << 20,
        "node {restarted}'s earlier life held all {mib} MiB when it was stopped: no new data can \
         show that the root took it back"
    );
    let node = restart_node(&out, &key, restarted);
    let new_pid = node.id() as i32;
    // Taken back means more than that the new life adopted the partial file (it does so before
    // its rejoin reaches the root): data arrived that the earlier life did not hold, so the
    // root's machine (a swarm's tracker) counts it live again and the run cannot end without it.
    wait_until("the root to take the restarted node back", || {
        writer_of(&out, restarted, kept + 1) == Some(new_pid)
    });
    // SAFETY: kill(2) of a node process this test started and stopped.
    assert_eq!(unsafe { libc::kill(held_pid[2], libc::SIGCONT) }, 0);
    let node_out = node.wait_with_output().unwrap();
    let node_err = String::from_utf8_lossy(&node_out.stderr);
    assert!(
        node_out.status.success(),
        "the restarted node failed: {node_err}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&node_out.stdout).unwrap_or_else(|e| panic!("{e}: {node_err}"));
    let resumed = report["resumed_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("not a rejoined node's report: {report}"));
    assert!(
        resumed >= min_resumed,
        "resumed only {resumed} bytes: {report}"
    );
    let got = std::fs::read(out.join(format!("node-{restarted}.bin"))).unwrap();
    assert!(
        got == payload,
        "the restarted node's file differs from the root's data"
    );

    let result = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr);
    let v: serde_json::Value = serde_json::from_slice(&result.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}; {stderr}", String::from_utf8_lossy(&result.stdout)));
    for n in v["nodes"].as_array().unwrap() {
        let id = n["node"].as_u64().unwrap() as u32;
        if id == dead {
            assert_ne!(n["status"], "finished", "{n}");
            assert!(!out.join(format!("node-{id}.bin")).exists());
        } else {
            assert_eq!(n["status"], "finished", "{n}");
            assert_eq!(n["verified"], true, "{n}");
            assert_eq!(n["bytes_received"], u64::from(mib) << 20, "{n}");
        }
        if id == restarted {
            assert_eq!(n["resumed_bytes"], resumed, "{n}");
        }
    }
    let leftovers: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!(".node-{restarted}.bin.")))
        .collect();
    assert!(leftovers.is_empty(), "partial files left: {leftovers:?}");
}

/// Issue 8's "a restarted one resumes and completes": two of 16 receivers killed with SIGKILL
/// during a MOB multicast of 256 MiB, one of them started again at once. The root dials lost
/// nodes again and takes the restarted one back with a rejoin job; it resumes from the
/// verified pieces its first life wrote at their offsets (the 16 MiB it held when killed, but
/// for a piece it may have been writing then) and fetches only the rest.
#[test]
fn a_receiver_killed_mid_mob_and_restarted_resumes_from_disk_and_completes() {
    let args = ["--nodes", "16", "--clusters", "4", "--protocol", "mob"];
    kill_and_restart(&args, 256, Holding::Each(16 << 20), [5, 9, 13], 15 << 20);
}

/// The same for Balanced Multicasting: the restarted node asks the root for every piece it
/// misses.
#[test]
fn a_receiver_restarted_mid_balanced_multicast_resumes_and_completes() {
    let args = ["--nodes", "8", "--clusters", "2", "--protocol", "balanced"];
    kill_and_restart(&args, 64, Holding::Each(8 << 20), [3, 6, 7], 7 << 20);
}

/// The same for BitTorrent: the tracker counts the restarted node live again. Its pieces come
/// in random order; each is written at its offset, so the restarted node keeps all it had, not
/// only a prefix.
#[test]
fn a_receiver_restarted_mid_bittorrent_rejoins_and_completes() {
    let args = [
        "--nodes",
        "8",
        "--clusters",
        "2",
        "--protocol",
        "bittorrent",
    ];
    kill_and_restart(&args, 128, Holding::Each(8 << 20), [3, 6, 7], 7 << 20);
}

/// A relay of a chain broadcast killed and restarted: a broadcast has no piece hashes to check
/// what it kept, so the restarted node starts over, asking the root for everything, while its
/// old subtree already hangs under the root. The victims are signalled once the relay (the
/// first of them in the chain) holds 8 MiB: the two below it hold no more.
#[test]
fn a_relay_killed_mid_broadcast_and_restarted_starts_over_and_completes() {
    kill_and_restart(
        &["--nodes", "8", "--tree", "chain"],
        128,
        Holding::First(8 << 20),
        [3, 6, 7],
        0,
    );
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
    signal_when_holding(dir.path(), &victims, Holding::Each(8 << 20), libc::SIGKILL);
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
    let pids = signal_when_holding(dir.path(), &victims, Holding::Each(4 << 20), libc::SIGSTOP);
    let stopped_at = Instant::now();
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
    // The others finishing says their own silence timers fired, not the root's (its last
    // word with a victim can be later): killing the victims before the root's timer fires
    // would end their connections with a reset, and the root would report that instead of
    // the silence. So the victims stay stopped past the root's silence timeout (10 s by
    // default) with a margin for a loaded machine.
    let root_gave_up = stopped_at + Timeouts::default().silent + Duration::from_secs(5);
    std::thread::sleep(root_gave_up.saturating_duration_since(Instant::now()));
    for &pid in &pids {
        // SAFETY: kill(2) of a node process this test started.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    check_result(child, dir.path(), 8, &victims, 128 << 20, "sent nothing");
}
