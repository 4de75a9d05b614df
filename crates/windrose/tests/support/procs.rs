//! Helpers of the tests that run `windrose`: the binary, the repository's data files,
//! temporary input files, runs that must succeed or fail as bad input, and for the processes on
//! loopback, group files on free ports, node and member processes, and the checks of what they
//! received.

#![allow(dead_code)]

use assert_cmd::Command;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

pub fn windrose() -> Command {
    Command::cargo_bin("windrose").unwrap()
}

/// A file under the repository's `data/`.
pub fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data")
        .join(rel)
}

/// A scenario file under the repository's `data/scenarios/`, as a command-line argument.
pub fn scenario(name: &str) -> String {
    data("scenarios").join(name).display().to_string()
}

/// A file in a fresh temporary directory (kept alive by the returned guard).
pub fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    (dir, path.display().to_string())
}

/// Runs windrose expecting success and returns stdout.
pub fn ok(args: &[&str]) -> String {
    let out = windrose()
        .args(args)
        .assert()
        .success()
        .get_output()
        .clone();
    String::from_utf8(out.stdout).unwrap()
}

/// Runs windrose expecting success with `--json` output and parses it.
pub fn ok_json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(args)).expect("stdout is one JSON object")
}

/// Runs windrose expecting bad-input failure: exit 2, nothing on stdout, exactly one stderr
/// line starting with `error: `, no panic. Returns that line.
pub fn bad(args: &[&str]) -> String {
    let out = windrose().args(args).assert().code(2).get_output().clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("RUST_BACKTRACE"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line expected:\n{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(out.stdout.is_empty(), "{args:?} printed on stdout");
    stderr.trim_end().to_string()
}

pub fn hash_file(path: &Path) -> String {
    blake3::hash(&std::fs::read(path).unwrap())
        .to_hex()
        .to_string()
}

/// `windrose local ARGS --json`, which must succeed: the parsed outcome.
pub fn local_json(args: &[&str]) -> serde_json::Value {
    let out = windrose()
        .arg("local")
        .args(args)
        .arg("--json")
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "windrose local {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `n` distinct ports on 127.0.0.1 below the kernel's ephemeral range, each free a moment ago.
/// Not `bind(0)`: that draws from the ephemeral range, where every outgoing
/// connection on the machine draws too (the members' own connections to each other, other
/// tests'), and may even give one port twice: a port can be taken before its member binds it,
/// and the member then exits at once ("cannot listen on ...: Address already in use"). The
/// start differs between processes and between the calls of one process (the tests here run
/// at once, and a start over must not pick the same ports), so two picks rarely meet.
pub fn free_ports(n: usize) -> Vec<String> {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let base = 10_000u32;
    let span = low.saturating_sub(base).max(2 * n as u32);
    let mut k = std::process::id()
        .wrapping_mul(7919)
        .wrapping_add(call.wrapping_mul(104_729));
    let mut ports = Vec::new();
    for _ in 0..span {
        let port = (base + k % span) as u16;
        k = k.wrapping_add(1);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            ports.push(port.to_string());
            if ports.len() == n {
                return ports;
            }
        }
    }
    panic!("fewer than {n} free ports in {base}..{}", base + span);
}

/// A port on 127.0.0.1 that was free a moment ago (see [`free_ports`]).
pub fn free_port() -> String {
    free_ports(1).remove(0)
}

/// A group file with node i at `addrs[i]` (a bare port means 127.0.0.1:port), in cluster
/// i % 2 (clusters interleaved, not in blocks).
pub fn write_group(path: &Path, name: &str, addrs: &[String]) {
    let mut text = format!("name = \"{name}\"\nprotocol_version = 2\n");
    for (i, a) in addrs.iter().enumerate() {
        let addr = if a.contains(':') {
            a.clone()
        } else {
            format!("127.0.0.1:{a}")
        };
        text.push_str(&format!(
            "\n[[node]]\nid = {i}\naddr = \"{addr}\"\ncluster = {}\n",
            i % 2
        ));
    }
    std::fs::write(path, text).unwrap();
}

/// `windrose node --once` for `id` of `group`, writing to `out`, waiting up to 30 s for a
/// collective.
pub fn spawn_node(group: &Path, id: u32, out: &Path) -> Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("windrose"))
        .args([
            "node",
            "--group",
            group.to_str().unwrap(),
            "--id",
            &id.to_string(),
        ])
        .args(["--once", "--out", out.to_str().unwrap(), "--wait", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `windrose node` for members `1..=n` of `group`, node i writing `dir/got-i.bin`: their output
/// paths and processes.
pub fn spawn_nodes(group: &Path, dir: &Path, n: u32) -> (Vec<std::path::PathBuf>, Vec<Child>) {
    let outs: Vec<_> = (1..=n).map(|i| dir.join(format!("got-{i}.bin"))).collect();
    let nodes = (1..=n)
        .map(|i| spawn_node(group, i, &outs[i as usize - 1]))
        .collect();
    (outs, nodes)
}

/// Waits for every node process: each must succeed and say it received `bytes` bytes, and each
/// output file must equal `data`.
pub fn check_nodes(nodes: Vec<Child>, outs: &[std::path::PathBuf], data: &Path, bytes: u64) {
    for n in nodes {
        let out = n.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let said = format!("received {bytes} bytes");
        assert!(String::from_utf8_lossy(&out.stdout).contains(&said));
    }
    for o in outs {
        assert_eq!(hash_file(o), hash_file(data));
    }
}

/// The `windrose` binary, for `std::process::Command`.
pub fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("windrose")
}

/// Kills the member processes a failing test leaves behind.
pub struct Members(pub Vec<Child>);
impl Drop for Members {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `n` `windrose group serve` members of `group`, member i given `--id i`, `args` and what
/// `member(i, command)` adds, which returns the control socket it will open; waits until every
/// socket exists.
pub fn spawn_members(
    group: &Path,
    n: usize,
    args: &[&str],
    mut member: impl FnMut(usize, &mut std::process::Command) -> PathBuf,
) -> Members {
    let mut members = Members(Vec::new());
    let mut sockets = Vec::new();
    for i in 0..n {
        let mut c = std::process::Command::new(bin());
        c.args(["group", "serve", "--id", &i.to_string()])
            .args(args)
            .arg("--group")
            .arg(group)
            .stdin(Stdio::null());
        sockets.push(member(i, &mut c));
        members.0.push(c.spawn().unwrap());
    }
    wait_for("control sockets", Duration::from_secs(30), || {
        sockets.iter().all(|s| s.exists())
    });
    members
}

/// The usual member: control socket `socket`, received files in `out` (created).
pub fn control_and_out(c: &mut std::process::Command, socket: PathBuf, out: PathBuf) -> PathBuf {
    std::fs::create_dir(&out).unwrap();
    c.arg("--control").arg(&socket).arg("--out-dir").arg(out);
    socket
}

/// Polls `ok` every 20 ms until it holds; fails the test naming `what` after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The BLAKE3 of every `transfer-*` file a `group serve` member wrote in `dir`, sorted.
pub fn received(dir: &Path) -> Vec<String> {
    let mut hashes: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("transfer-")
        })
        .map(|p| hash_file(&p))
        .collect();
    hashes.sort();
    hashes
}

/// Bytes a partial output file holds: a broadcast writes it in order (its length), a multicast
/// node writes each piece at its offset in a file of the full length (zeros elsewhere), so this
/// counts the 1 MiB blocks (the default piece) whose first bytes are not all zero. The payloads
/// of these tests are random or a pattern with no zero run that long.
pub fn bytes_held(path: &Path) -> u64 {
    use std::os::unix::fs::FileExt;
    const BLOCK: u64 = 1 << 20;
    let Ok(file) = std::fs::File::open(path) else {
        return 0;
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let mut head = [0u8; 64];
    (0..len.div_ceil(BLOCK))
        .filter(|b| {
            let n = file.read_at(&mut head, b * BLOCK).unwrap_or(0);
            head[..n].iter().any(|&x| x != 0)
        })
        .map(|b| BLOCK.min(len - b * BLOCK))
        .sum()
}
