//! Issue 21's defects of the real runtime, as a careless or hostile user meets them: outputs
//! that are not regular files, sources that are not regular files or change during the run,
//! receivers that outlive their root, strangers at a waiting node, mismatched group files,
//! ports in use.

#[path = "support/procs.rs"]
mod procs;

use predicates::prelude::*;
use procs::{free_ports, windrose, write_group};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::time::{Duration, Instant};

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo(3) with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// `node --out PATH` where PATH exists and is not a regular file (a FIFO, a directory, a
/// symbolic link) or lies in no directory: refused at once with exit code 2, before waiting for
/// a job, and PATH is left as it was.
#[test]
fn node_refuses_an_output_that_is_not_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    write_group(&group, "lab-out", &free_ports(2));
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let target = dir.path().join("target.bin");
    std::fs::write(&target, b"keep me").unwrap();
    let link = dir.path().join("link.bin");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let cases = [
        (fifo.clone(), "is a FIFO"),
        (sub.clone(), "is a directory"),
        (link.clone(), "is a symbolic link"),
        (dir.path().join("nowhere/out.bin"), "nowhere"),
    ];
    for (out, want) in cases {
        windrose()
            .args(["node", "--group", group.to_str().unwrap(), "--id", "1"])
            .arg("--out")
            .arg(&out)
            .args(["--wait", "5"])
            .timeout(Duration::from_secs(30))
            .assert()
            .code(2)
            .stderr(predicate::str::contains(format!("--out {}", out.display())))
            .stderr(predicate::str::contains(want));
    }
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    assert!(sub.is_dir());
}

/// Bytes the partial output `.NAME.windrose-partial-PID-*` of process `pid` in `dir` holds: a
/// multicast node writes each 1 MiB piece at its offset in a file of the full length, so this
/// counts the 1 MiB blocks whose first bytes are not all zero (the payloads here have no zero
/// run that long).
fn partial_held(dir: &Path, name: &str, pid: u32) -> u64 {
    use std::os::unix::fs::FileExt;
    let prefix = format!(".{name}.windrose-partial-{pid}-");
    let Some(path) = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
    else {
        return 0;
    };
    let Ok(file) = std::fs::File::open(path) else {
        return 0;
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let mut head = [0u8; 64];
    (0..len.div_ceil(1 << 20))
        .filter(|b| {
            let n = file.read_at(&mut head, b << 20).unwrap_or(0);
            head[..n].iter().any(|&x| x != 0)
        })
        .count() as u64
        * (1 << 20)
}

/// A file of `mib` MiB with no run of zeros.
fn pattern_file(path: &Path, mib: u32) {
    let payload: Vec<u8> = (0..mib << 20)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8 | 1)
        .collect();
    std::fs::write(path, payload).unwrap();
}

/// Defect 3: a receiver stopped (SIGSTOP) mid-MOB is given up by the root and its peers after
/// the silence timeout; the others finish and the root ends. Continued (SIGCONT) afterwards,
/// the receiver must end at once (its root is gone: no Bye can come) instead of holding its
/// port for the 300 s of the finish timeout, and leave no file.
#[test]
fn a_receiver_resumed_after_its_root_gave_up_on_it_ends_at_once() {
    // Node 2 is stopped once it holds 8 MiB. On a loaded machine the poll may not run while
    // node 2 receives the whole 256 MiB: then the scenario did not happen, and it starts over
    // (a run never checks anything it did not set up).
    let mut attempt = 0;
    let (dir, ports, data, outs, nodes, root, mut victim, pid) = loop {
        attempt += 1;
        let dir = tempfile::tempdir().unwrap();
        let group = dir.path().join("group.toml");
        let ports = free_ports(3);
        write_group(&group, "lab-stopped", &ports);
        let data = dir.path().join("data.bin");
        pattern_file(&data, 256);
        let (outs, mut nodes) = procs::spawn_nodes(&group, dir.path(), 2);
        let root = std::process::Command::new(assert_cmd::cargo::cargo_bin("windrose"))
            .args(["multicast", "--protocol", "mob", "--quiet"])
            .args(["--group", group.to_str().unwrap()])
            .args(["--file", data.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut victim = nodes.pop().unwrap();
        let pid = victim.id();
        let deadline = Instant::now() + Duration::from_secs(120);
        let held = loop {
            if partial_held(dir.path(), "got-2.bin", pid) >= 8 << 20 {
                break true;
            }
            if victim.try_wait().unwrap().is_some() || outs[1].exists() {
                break false;
            }
            assert!(Instant::now() < deadline, "node 2 never received 8 MiB");
            std::thread::sleep(Duration::from_millis(2));
        };
        if held {
            break (dir, ports, data, outs, nodes, root, victim, pid);
        }
        // Node 2 finished before the poll saw it hold 8 MiB: tear down and start again.
        assert!(
            attempt < 5,
            "node 2 received everything before it could be stopped, 5 times"
        );
        for mut c in nodes.into_iter().chain([root, victim]) {
            let _ = c.kill();
            let _ = c.wait();
        }
    };
    // SAFETY: kill(2) of a process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
    let out = root.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "node 2 was stopped: {stdout}");
    assert!(stdout.contains("\nnode 2: "), "{stdout}");
    procs::check_nodes(nodes, &outs[..1], &data, 256 << 20);
    // SAFETY: kill(2) of a process this test started and stopped.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGCONT) }, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = victim.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = victim.kill();
            let _ = victim.wait();
            panic!("node 2 still runs 60 s after it was continued, its root long gone");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(victim.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    // It names its root as the reason, in one wording whichever of its Host and its machine
    // noticed first.
    assert!(
        err.contains("lost the collective's initiator, node 0") && err.contains("error: "),
        "{err}"
    );
    assert!(!outs[1].exists());
    assert_eq!(partial_held(dir.path(), "got-2.bin", pid), 0);
    // Its port is free again.
    std::net::TcpListener::bind(format!("127.0.0.1:{}", ports[2])).unwrap();
}

/// Defect 10: `bcast`, `multicast` and `scatter --file` of a FIFO hung for ever (opening a FIFO
/// waits for a writer); a directory failed late. Both are refused at once with exit code 2.
#[test]
fn sources_that_are_not_regular_files_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    write_group(&group, "lab-fifo", &free_ports(2));
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    for (file, what) in [
        (&fifo, "a FIFO"),
        (&dir.path().to_path_buf(), "a directory"),
    ] {
        for cmd in [
            vec!["bcast"],
            vec!["multicast", "--protocol", "mob"],
            vec!["scatter"],
        ] {
            windrose()
                .args(&cmd)
                .args(["--group", group.to_str().unwrap()])
                .arg("--file")
                .arg(file)
                .timeout(Duration::from_secs(30))
                .assert()
                .code(2)
                .stderr(predicate::str::contains(file.to_str().unwrap()))
                .stderr(predicate::str::contains(format!(
                    "it is {what}: the data to send must be a regular file"
                )));
        }
    }
}

/// Defect 10: `local --port P` with P taken on a node's address read "no answer within 5s"
/// (the root reached whatever held the port); it is refused up front, naming the node and
/// the address.
#[test]
fn local_refuses_a_port_in_use() {
    let holder = std::net::TcpListener::bind("127.0.0.3:0").unwrap();
    let port = holder.local_addr().unwrap().port().to_string();
    windrose()
        .args(["local", "--nodes", "3", "--size", "1MiB", "--port", &port])
        .timeout(Duration::from_secs(60))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!(
            "--port {port}: node 1 cannot listen on 127.0.0.3:{port}"
        )))
        .stderr(predicate::str::contains("in use"));
    windrose()
        .args(["local", "--nodes", "3", "--size", "1MiB", "--port", "0"])
        .timeout(Duration::from_secs(60))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--port 0"));
}

/// Waits (at most `limit`) for `child` to exit; its status and standard error.
fn wait_bounded(
    mut child: std::process::Child,
    what: &str,
    limit: Duration,
) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still runs after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status, err)
}

/// Starts the root `windrose ARGS` over `group` and `data`, and nodes 1 and 2 writing
/// `got-1.bin` and `got-2.bin`; stops node 2 (SIGSTOP) once it holds 8 MiB, so the run cannot
/// end, and then calls `change` on the source file. Returns the root, node 1, node 2 (stopped).
fn run_and_change_the_source(
    dir: &Path,
    args: &[&str],
    change: impl FnOnce(&Path),
) -> [std::process::Child; 3] {
    let group = dir.join("group.toml");
    write_group(&group, "lab-source", &free_ports(3));
    let data = dir.join("data.bin");
    pattern_file(&data, 256);
    let (_, mut nodes) = procs::spawn_nodes(&group, dir, 2);
    let root = std::process::Command::new(assert_cmd::cargo::cargo_bin("windrose"))
        .args(args)
        .args(["--quiet", "--group", group.to_str().unwrap()])
        .args(["--file", data.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let node2 = nodes.pop().unwrap();
    let node1 = nodes.pop().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while partial_held(dir, "got-2.bin", node2.id()) < 8 << 20 {
        assert!(Instant::now() < deadline, "node 2 never received 8 MiB");
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: kill(2) of a process this test started.
    assert_eq!(unsafe { libc::kill(node2.id() as i32, libc::SIGSTOP) }, 0);
    change(&data);
    [root, node1, node2]
}

/// The files left in `dir` besides the group and the data.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "group.toml" && n != "data.bin")
        .collect()
}

/// Defect 2: the source file of a MOB multicast is overwritten in the middle (as `dd
/// conv=notrunc` would) while the run is held open by a stopped receiver. The root notices,
/// calls the run off with an error naming the file, every receiver is told why, and nothing
/// is left under a final name (before: the root resent the failing piece for ever).
#[test]
fn a_source_changed_during_a_mob_run_ends_it_with_a_clear_error() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let [root, node1, node2] = run_and_change_the_source(
        dir.path(),
        &["multicast", "--protocol", "mob", "--timeout", "10"],
        |data| {
            let f = std::fs::OpenOptions::new().write(true).open(data).unwrap();
            f.write_all_at(&vec![0u8; 1 << 20], 90 << 20).unwrap();
        },
    );
    let (status, err) = wait_bounded(root, "the root", Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("data.bin was modified during the run"),
        "{err}"
    );
    // Node 1 hears the root call the run off: its file watch saw the file modified, or its
    // check of the changed piece before sending it failed (whichever came first).
    let (status, err) = wait_bounded(node1, "node 1", Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("node 0 called the collective off")
            && (err.contains("modified during the run")
                || err.contains("the root's data no longer matches its manifest at piece 90")),
        "{err}"
    );
    // SAFETY: kill(2) of a process this test started and stopped.
    assert_eq!(unsafe { libc::kill(node2.id() as i32, libc::SIGCONT) }, 0);
    let (status, err) = wait_bounded(node2, "node 2", Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}

/// Defect 10: the source of a broadcast truncated during the run read "Bad address" (the
/// root's writes from the mapping past the file's new end), or worse, a SIGBUS when the root
/// hashed it at the end. The root now says the file was truncated, and nothing half-received
/// is left under a final name.
#[test]
fn a_source_truncated_during_a_broadcast_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let mut whole = String::new();
    let [root, node1, node2] =
        run_and_change_the_source(dir.path(), &["bcast", "--tree", "flat"], |data| {
            whole = procs::hash_file(data);
            let f = std::fs::OpenOptions::new().write(true).open(data).unwrap();
            f.set_len(0).unwrap();
        });
    let (status, err) = wait_bounded(root, "the root", Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("data.bin was truncated during the run (0 bytes, was 268435456)"),
        "{err}"
    );
    assert!(!err.contains("Bad address"), "{err}");
    // Node 1 may have had every byte before the truncation: then its file is whole.
    let (status, err) = wait_bounded(node1, "node 1", Duration::from_secs(60));
    match status.code() {
        Some(0) => assert_eq!(procs::hash_file(&dir.path().join("got-1.bin")), whole),
        // Told why by the root, or (a busy machine: the root exited before its abort reached
        // node 1) it lost the root, as in the defect-3 test above; either way it fails and
        // keeps nothing (checked below).
        _ => assert!(
            err.contains("truncated during the run")
                || err.contains("lost the collective's initiator, node 0"),
            "{err}"
        ),
    }
    // SAFETY: kill(2) of a process this test started and stopped.
    assert_eq!(unsafe { libc::kill(node2.id() as i32, libc::SIGCONT) }, 0);
    let (status, err) = wait_bounded(node2, "node 2", Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{err}");
    let left: Vec<String> = leftovers(dir.path())
        .into_iter()
        .filter(|n| n != "got-1.bin")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Defect 6: `local --size` and `scatter --load-size` beyond what memory and disk can hold
/// aborted the process (SIGABRT: the payload was built in memory). They are refused at once
/// with exit code 2, saying why (4 PiB: more than any disk here).
#[test]
fn random_payloads_larger_than_memory_and_disk_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    write_group(&group, "lab-huge", &free_ports(2));
    let huge = "4096TiB";
    for args in [
        vec!["local", "--nodes", "2", "--size", huge],
        vec![
            "scatter",
            "--group",
            group.to_str().unwrap(),
            "--load-size",
            huge,
        ],
    ] {
        windrose()
            .args(&args)
            .timeout(Duration::from_secs(60))
            .assert()
            .code(2)
            .stderr(predicate::str::contains(
                "a random payload of 4503599627370496 bytes fits neither in memory",
            ));
    }
}

/// Output into a pipe whose reader is gone (`windrose … | head`): the command ends normally,
/// with no panic. The pipe's read end is closed before the command starts, so every write
/// fails (EPIPE): the case cannot pass by the output fitting the pipe's buffer.
#[test]
fn output_into_a_closed_pipe_is_not_a_panic() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    for args in [
        &["testbed", "status"][..],
        &[
            "tree",
            "build",
            "--algo",
            "balanced-path",
            "--root",
            "0",
            "--json",
        ][..],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_windrose"))
            .args(args)
            .stdout(writer.try_clone().unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?}: {stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
