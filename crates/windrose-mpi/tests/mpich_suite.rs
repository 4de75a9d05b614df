//! MPICH's own broadcast tests (test/mpi/coll of MPICH's sources) run unmodified with the shim
//! preloaded, under every installed ABI. MPICH's code is not part of this repository: the test
//! takes a checkout of MPICH's sources from `WINDROSE_MPI_MPICH_SRC` (e.g. a `git clone` of
//! pmodels/mpich), copies the files it needs into the test's temporary folder, and builds them
//! with each MPI's compiler wrapper. Without the variable it is skipped, saying why.
//!
//! Built here: bcasttest, bcastzerotype and icbcast (intercommunicators) with MPICH's test
//! harness (util/mtest.c, mtest_common.c, mtest_single.c, run_mpitests.c), and under MPI 4
//! ABIs p_bcast and p_bcast2 (persistent broadcasts; Open MPI 4.1 has no MPI_Bcast_init).
//! Not built: bcast.c and bcast_gpu.c, which need MPICH's DTPools library (built only by
//! MPICH's own configure). The harness's configure header is replaced by a few defines that
//! hold on Linux. Every program must print MPICH's "No Errors" and exit 0, with
//! `WINDROSE_MPI_THRESHOLD=0` so that every contiguous broadcast of more than two ranks takes
//! windrose's path; bcasttest must have taken it at every rank.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The files of MPICH's test suite the programs need, relative to its `test/mpi`.
const FILES: &[&str] = &[
    "coll/bcasttest.c",
    "coll/bcastzerotype.c",
    "coll/icbcast.c",
    "coll/p_bcast.c",
    "coll/p_bcast2.c",
    "util/mtest.c",
    "util/mtest_common.c",
    "util/mtest_single.c",
    "util/run_mpitests.c",
    "include/mpitest.h",
    "include/mtest_common.h",
    "include/mpithreadtest.h",
    "include/mpicolltest.h",
    "include/dtypes.h",
];

/// What MPICH's configure would say here (Linux, no thread package for single tests).
const CONF: &str = "#define HAVE_STDARG_H 1\n#define HAVE_SYS_TIME_H 1\n\
#define HAVE_SYS_RESOURCE_H 1\n#define HAVE_GETRUSAGE 1\n#define HAVE_MPI_WIN_CREATE 1\n\
#define HAVE_UNISTD_H 1\n#define THREAD_PACKAGE_NAME THREAD_PACKAGE_NONE\n";

/// The sources copied from the checkout at `src` into a fresh folder, or why not.
fn sources(src: &Path) -> Result<PathBuf, String> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpich-suite");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for f in FILES {
        let from = src.join("test/mpi").join(f);
        let name = Path::new(f).file_name().expect("a file name");
        std::fs::copy(&from, dir.join(name)).map_err(|e| format!("{}: {e}", from.display()))?;
    }
    std::fs::write(dir.join("mpitestconf.h"), CONF).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("mtest_mpix.h"), "").map_err(|e| e.to_string())?;
    Ok(dir)
}

/// `name` built with `abi`'s wrapper in `dir`.
fn build(abi: Abi, dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(format!("{name}-{}", abi.name));
    let mut cmd = Command::new(abi.mpicc);
    cmd.current_dir(dir)
        .args(["-O1", "-I.", "-o"])
        .arg(&exe)
        .arg(format!("{name}.c"))
        .args(["mtest.c", "mtest_common.c", "mtest_single.c"]);
    // The harness's main calls the test's run(); icbcast has its own main.
    if name != "icbcast" {
        cmd.arg("run_mpitests.c");
    }
    run_checked(&mut cmd, &format!("{} {name}.c", abi.mpicc));
    exe
}

/// Each program on each of its rank counts (from MPICH's coll/testlist) with the shim.
fn suite(abi: Abi, mpi4: bool) {
    let Some(src) = std::env::var_os("WINDROSE_MPI_MPICH_SRC") else {
        println!(
            "SKIPPED: WINDROSE_MPI_MPICH_SRC is not set, so MPICH's broadcast tests did not run \
             (set it to a checkout of MPICH's sources, e.g. git clone of pmodels/mpich)"
        );
        return;
    };
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let dir = sources(Path::new(&src))
        .unwrap_or_else(|e| panic!("WINDROSE_MPI_MPICH_SRC does not hold MPICH's test suite: {e}"));
    let mut cases = vec![
        ("bcasttest", 4),
        ("bcasttest", 8),
        ("bcastzerotype", 5),
        ("icbcast", 4),
    ];
    if mpi4 {
        cases.extend([("p_bcast", 4), ("p_bcast2", 8)]);
    }
    for (name, ranks) in cases {
        let exe = build(abi, &dir, name);
        let (status, stdout, stderr, what) = launch_exe(
            abi,
            ranks,
            &[("WINDROSE_MPI_THRESHOLD", "0")],
            &exe,
            &[],
            HANG_GUARD,
        );
        assert!(
            status.success() && stdout.lines().any(|l| l.trim() == "No Errors"),
            "{what} ({status}):\n{stdout}\n{stderr}"
        );
        let r = RunResult::parse(stdout, stderr);
        assert_eq!(
            r.windrose.len(),
            ranks as usize,
            "not every rank printed its stats:\n{}",
            r.stderr
        );
        if name == "bcasttest" {
            assert!(
                r.windrose.values().all(|&n| n > 0),
                "bcasttest did not take windrose's path everywhere: {:?}",
                r.windrose
            );
        }
        println!(
            "{}: MPICH's {name} passed on {ranks} ranks (windrose calls per rank {:?})",
            abi.name,
            r.windrose.values().collect::<Vec<_>>()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn openmpi_passes_mpichs_broadcast_tests() {
    suite(OPENMPI, false);
}

#[test]
fn mpich_passes_mpichs_broadcast_tests() {
    suite(MPICH, true);
}

#[test]
fn standard_abi_passes_mpichs_broadcast_tests() {
    suite(STANDARD, true);
}
