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
use std::time::Duration;

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
