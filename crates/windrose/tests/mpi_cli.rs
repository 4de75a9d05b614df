//! End-to-end tests of `windrose mpi env`: launch lines for the MPIs found on PATH with the
//! shim of each one's ABI (read from the MPI library the shim links), JSON, Slurm lines only
//! with srun, quoting, and exit code 2 for a file that is not a shim.
//!
//! Hermetic: PATH is a temporary folder of stand-in launchers, and the shims are stand-in ELF
//! files naming the MPI library they link, so the installed MPIs do not matter.

use assert_cmd::Command;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn windrose() -> Command {
    Command::cargo_bin("windrose").unwrap()
}

/// A folder of stand-in executables named `names`.
fn bin(dir: &Path, names: &[&str]) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for n in names {
        let p = bin.join(n);
        std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

/// A stand-in shim: an ELF header and the name of the MPI library it links.
fn shim(path: &Path, links: &str) -> PathBuf {
    let mut bytes = b"\x7fELF\x02\x01\x01\0".to_vec();
    bytes.extend_from_slice(&[0u8; 56]);
    bytes.extend_from_slice(links.as_bytes());
    bytes.push(0);
    std::fs::write(path, bytes).unwrap();
    path.to_path_buf()
}

#[test]
fn prints_launch_lines_for_each_installed_mpi_with_its_shim() {
    let dir = tempfile::tempdir().unwrap();
    let bin = bin(dir.path(), &["mpirun.openmpi", "mpiexec.mpich", "srun"]);
    let ompi = shim(&dir.path().join("a.so"), "libmpi.so.40");
    let mpich = shim(&dir.path().join("b.so"), "libmpich.so.12");
    let out = windrose()
        .env("PATH", &bin)
        .args([
            "mpi",
            "env",
            "--ranks",
            "8",
            "--program",
            "./prog",
            "--shim",
        ])
        .arg(&mpich)
        .arg("--shim")
        .arg(&ompi)
        .assert()
        .success()
        .get_output()
        .clone();
    let text = String::from_utf8(out.stdout).unwrap();
    let (b, o, m) = (bin.display(), ompi.display(), mpich.display());
    for line in [
        format!("{b}/mpirun.openmpi -np 8 -x LD_PRELOAD={o} ./prog"),
        format!("srun -n 8 --mpi=pmix --kill-on-bad-exit=1 --export=ALL,LD_PRELOAD={o} ./prog"),
        format!("{b}/mpiexec.mpich -np 8 -env LD_PRELOAD {m} ./prog"),
        format!("srun -n 8 --mpi=pmi2 --kill-on-bad-exit=1 --export=ALL,LD_PRELOAD={m} ./prog"),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        );
    }
    // No MPI 5 hydra on this PATH: no standard-ABI section.
    assert!(!text.contains("# standard"), "{text}");
}

#[test]
fn json_names_launchers_shims_and_what_to_build() {
    let dir = tempfile::tempdir().unwrap();
    // MPICH 5's pip layout: mpicc_abi and its hydra side by side; no Slurm.
    let bin = bin(
        dir.path(),
        &["mpirun.openmpi", "mpicc_abi", "mpiexec.hydra"],
    );
    let std_shim = shim(&dir.path().join("s.so"), "libmpi_abi.so.1");
    let out = windrose()
        .env("PATH", &bin)
        .args(["mpi", "env", "--json", "--shim"])
        .arg(&std_shim)
        .assert()
        .success()
        .get_output()
        .clone();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["srun"].is_null());
    let by_abi = |a: &str| {
        v["mpis"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["abi"] == a)
            .unwrap()
            .clone()
    };
    let s = by_abi("standard");
    assert_eq!(
        s["launcher"],
        bin.join("mpiexec.hydra").display().to_string()
    );
    assert_eq!(s["shim"], std_shim.display().to_string());
    assert_eq!(
        s["commands"],
        serde_json::json!([format!(
            "{}/mpiexec.hydra -np 4 -env LD_PRELOAD {} ./my_mpi_program",
            bin.display(),
            std_shim.display()
        )])
    );
    // Open MPI is there but its shim is not (and --shim stops the search): how to build it.
    let o = by_abi("openmpi");
    assert!(o["shim"].is_null());
    assert_eq!(o["commands"], serde_json::json!([]));
    assert!(o["build"]
        .as_str()
        .unwrap()
        .contains("WINDROSE_MPI_ABI=openmpi cargo build --release -p windrose-mpi"));
    let m = by_abi("mpich");
    assert!(m["launcher"].is_null());
}

#[test]
fn a_shim_in_the_current_folder_is_found_and_odd_paths_are_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let bin = bin(dir.path(), &["mpiexec.mpich"]);
    let here = dir.path().join("my run");
    std::fs::create_dir_all(&here).unwrap();
    shim(&here.join("libwindrose_mpi-mpich.so"), "libmpich.so.12");
    let out = windrose()
        .env("PATH", &bin)
        .current_dir(&here)
        .args(["mpi", "env"])
        .assert()
        .success()
        .get_output()
        .clone();
    let text = String::from_utf8(out.stdout).unwrap();
    let want = format!(
        "{}/mpiexec.mpich -np 4 -env LD_PRELOAD '{}' ./my_mpi_program",
        bin.display(),
        here.join("libwindrose_mpi-mpich.so").display()
    );
    assert!(
        text.lines().any(|l| l == want),
        "missing {want:?} in:\n{text}"
    );
    assert!(text.contains("# srun is not on PATH"), "{text}");
}

#[test]
fn files_that_are_not_shims_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "libmpi.so.40").unwrap();
    windrose()
        .args(["mpi", "env", "--shim"])
        .arg(&text)
        .assert()
        .code(2)
        .stderr(predicates::str::contains(format!(
            "--shim {}: not a shared library",
            text.display()
        )));
    let plain = shim(&dir.path().join("x.so"), "libc.so.6");
    windrose()
        .args(["mpi", "env", "--shim"])
        .arg(&plain)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("links none of libmpi.so.40"));
    let a = shim(&dir.path().join("a.so"), "libmpi.so.40");
    let b = shim(&dir.path().join("b.so"), "libmpi.so.40");
    windrose()
        .args(["mpi", "env", "--shim"])
        .arg(&a)
        .arg("--shim")
        .arg(&b)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("a second openmpi shim"));
    windrose()
        .args(["mpi", "env", "--shim"])
        .arg(dir.path().join("missing.so"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains("missing.so: cannot read it"));
}
