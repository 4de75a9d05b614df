//! The shim in unmodified MPI programs: tests/c/bcast_check.c, built with each MPI's compiler
//! wrapper and run under its mpirun with the shim preloaded. The program checks every
//! broadcast byte for byte against PMPI_Bcast and the root's pattern (and aborts at the first
//! difference); these tests check that it ran to the end at every rank and that the windrose
//! path was taken exactly as often as the program expects (WINDROSE_MPI_STATS=path).
//!
//! Each ABI's tests are skipped, with a message saying so, only when that MPI's mpirun is not
//! installed. The shim for the ABI the crate was built for is the cdylib built with this
//! test; the other ABI's is built by `cargo build` into its own target directory
//! (<target>/windrose-mpi-abi/<abi>), so `cargo test` alone runs both.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
struct Abi {
    name: &'static str,
    mpicc: &'static str,
    /// The launcher: a name on PATH, or (with `beside`) the one next to `mpicc`.
    mpirun: &'static str,
    beside: bool,
    /// What installs it.
    install: &'static str,
}

const OPENMPI: Abi = Abi {
    name: "openmpi",
    mpicc: "mpicc.openmpi",
    mpirun: "mpirun.openmpi",
    beside: false,
    install: "apt-get install openmpi-bin libopenmpi-dev",
};
const MPICH: Abi = Abi {
    name: "mpich",
    mpicc: "mpicc.mpich",
    mpirun: "mpiexec.mpich",
    beside: false,
    install: "apt-get install mpich libmpich-dev",
};
/// The MPI 5 standard ABI: MPICH 5's libmpi_abi, its mpicc_abi and its own hydra.
const STANDARD: Abi = Abi {
    name: "standard",
    mpicc: "mpicc_abi",
    mpirun: "mpiexec.hydra",
    beside: true,
    install: "pip install mpich==5.0.2, its bin directory on PATH",
};

/// A run that takes longer than this is stuck: it is killed and the test fails (a guard
/// against hangs, not a timing assertion).
const HANG_GUARD: Duration = Duration::from_secs(600);

fn find(exe: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(exe))
            .find(|f| f.is_file())
    })
}

/// This ABI's launcher.
fn launcher(abi: Abi) -> Option<PathBuf> {
    if abi.beside {
        let dir = find(abi.mpicc)?.parent()?.to_path_buf();
        Some(dir.join(abi.mpirun)).filter(|p| p.is_file())
    } else {
        find(abi.mpirun)
    }
}

/// False (after saying why) when this ABI's MPI is not installed.
fn available(abi: Abi) -> bool {
    for (exe, found) in [
        (abi.mpicc, find(abi.mpicc).is_some()),
        (abi.mpirun, launcher(abi).is_some()),
    ] {
        if !found {
            println!(
                "SKIPPED: {exe} is not installed, so the {} tests of the MPI shim did not run \
                 ({})",
                abi.name, abi.install
            );
            return false;
        }
    }
    true
}

/// The directory this test binary was built into (…/target/<profile>).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary lives in <target>/<profile>/deps")
        .to_path_buf()
}

fn run_checked(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The shim built for `abi` (built once per test binary).
fn shim(abi: Abi) -> PathBuf {
    static BUILT: OnceLock<Mutex<BTreeMap<&'static str, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = built.get(abi.name) {
        return p.clone();
    }
    // `cargo test` leaves the cdylib built with this test's library in deps/ (`cargo build`
    // also copies it up one level).
    let ours = ["deps/libwindrose_mpi.so", "libwindrose_mpi.so"]
        .map(|p| profile_dir().join(p))
        .into_iter()
        .find(|p| p.is_file());
    let path = if let Some(p) = ours.filter(|_| windrose_mpi::BUILT_ABI == abi.name) {
        p
    } else {
        let target = profile_dir()
            .parent()
            .expect("a target directory")
            .join("windrose-mpi-abi")
            .join(abi.name);
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        run_checked(
            Command::new(cargo)
                .args(["build", "--release", "-p", "windrose-mpi", "--lib"])
                .env("WINDROSE_MPI_ABI", abi.name)
                .env("CARGO_TARGET_DIR", &target)
                .current_dir(env!("CARGO_MANIFEST_DIR")),
            &format!("cargo build of the {} shim", abi.name),
        );
        target.join("release").join("libwindrose_mpi.so")
    };
    assert!(path.is_file(), "no shim at {}", path.display());
    built.insert(abi.name, path.clone());
    path
}

/// tests/c/bcast_check.c built with `abi`'s wrapper.
fn program(abi: Abi) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mpi-{}", abi.name));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("bcast_check");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/bcast_check.c");
    run_checked(
        Command::new(abi.mpicc)
            .args(["-O2", "-Wall", "-Werror", "-o"])
            .arg(&exe)
            .arg(&src),
        &format!("{} {}", abi.mpicc, src.display()),
    );
    exe
}

/// What one run printed: per rank, the calls the program expects on windrose's path, the
/// calls it checked, and the shim's count of windrose calls.
#[derive(Debug, Default)]
struct RunResult {
    expected: BTreeMap<u32, u64>,
    checked: BTreeMap<u32, u64>,
    windrose: BTreeMap<u32, u64>,
    /// Ranks that printed `truncate-ok`.
    truncate_ok: Vec<u32>,
    /// Ranks that printed `free-ok`.
    free_ok: Vec<u32>,
    /// Everything printed, for messages.
    stdout: String,
    stderr: String,
}

impl RunResult {
    /// Asserts every one of `ranks` printed its three lines.
    fn complete(&self, ranks: u32) {
        let all: Vec<u32> = (0..ranks).collect();
        for (name, map) in [
            ("expect-windrose", &self.expected),
            ("checked", &self.checked),
            ("windrose-mpi stats", &self.windrose),
        ] {
            assert_eq!(
                map.keys().copied().collect::<Vec<_>>(),
                all,
                "not every rank printed its {name} line:\n{}\n{}",
                self.stdout,
                self.stderr
            );
        }
    }
}

/// Runs the program on `ranks` ranks with the shim preloaded and `env` set for every rank:
/// its exit status, stdout and stderr, and the command for messages.
fn launch(
    abi: Abi,
    ranks: u32,
    env: &[(&str, &str)],
    args: &[&str],
) -> (std::process::ExitStatus, String, String, String) {
    let shim = shim(abi);
    let exe = program(abi);
    let mut all_env: Vec<(String, String)> = vec![
        ("LD_PRELOAD".into(), shim.display().to_string()),
        ("WINDROSE_MPI_STATS".into(), "path".into()),
    ];
    all_env.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut cmd = Command::new(launcher(abi).expect("checked by available"));
    cmd.args(["-np", &ranks.to_string()]);
    if abi.name == "openmpi" {
        // Root in containers, more ranks than cores, and no busy spinning on a shared machine.
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            .env("OMPI_MCA_mpi_yield_when_idle", "1");
        for (k, v) in &all_env {
            cmd.args(["-x", &format!("{k}={v}")]);
        }
    } else {
        // Hydra, started without a resource manager: every rank on this machine.
        cmd.args(["-launcher", "fork"]);
        for (k, v) in &all_env {
            cmd.args(["-env", k, v]);
        }
    }
    cmd.arg(&exe).args(args);
    let what = format!(
        "{} -np {ranks} {} {}",
        abi.mpirun,
        exe.display(),
        args.join(" ")
    );
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let id = child.id();
    let started = Instant::now();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    while !waiter.is_finished() {
        if started.elapsed() > HANG_GUARD {
            // Only the launcher we started (its ranks die with it).
            let _ = Command::new("kill").arg(id.to_string()).status();
            panic!("{what} did not end within {HANG_GUARD:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = waiter.join().unwrap().expect("the run's output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status, stdout, stderr, what)
}

/// Runs the program (see [`launch`]), which must succeed, and reads what it printed.
fn mpirun(abi: Abi, ranks: u32, env: &[(&str, &str)], args: &[&str]) -> RunResult {
    let (status, stdout, stderr, what) = launch(abi, ranks, env, args);
    assert!(
        status.success(),
        "{what} failed ({status}):\n{stdout}\n{stderr}"
    );
    let mut r = RunResult::default();
    for line in stdout.lines().chain(stderr.lines()) {
        let w: Vec<&str> = line.split_whitespace().collect();
        let num =
            |i: usize| -> u64 { w[i].parse().unwrap_or_else(|_| panic!("bad line {line:?}")) };
        match w.as_slice() {
            ["expect-windrose", ..] => {
                r.expected.insert(num(1) as u32, num(2));
            }
            ["checked", ..] => {
                r.checked.insert(num(1) as u32, num(2));
            }
            ["windrose-mpi", "stats:", "rank", ..] => {
                r.windrose.insert(num(3) as u32, num(5));
            }
            ["truncate-ok", ..] => r.truncate_ok.push(num(1) as u32),
            ["free-ok", ..] => r.free_ok.push(num(1) as u32),
            _ => {}
        }
    }
    r.stdout = stdout;
    r.stderr = stderr;
    r
}

/// One MPI run at a time: the tests share a small machine, and each run uses every core.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every root, type, size and communicator on `ranks` ranks; windrose's path taken exactly
/// where the program expects it.
fn sweep(abi: Abi, ranks: u32, max_bytes: &str, repeats: &str) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let r = mpirun(
        abi,
        ranks,
        &[("WINDROSE_MPI_THRESHOLD", "1000")],
        &["1000", max_bytes, repeats],
    );
    r.complete(ranks);
    assert_eq!(r.windrose, r.expected, "windrose calls per rank");
    for (rank, n) in &r.checked {
        assert!(*n > 100, "rank {rank} checked only {n} broadcasts");
    }
    if ranks > 2 {
        for (rank, n) in &r.windrose {
            assert!(*n > 100, "rank {rank} took windrose's path only {n} times");
        }
    } else {
        assert!(r.windrose.values().all(|&n| n == 0), "two ranks fall back");
    }
}

/// WINDROSE_MPI=off: every call goes to PMPI_Bcast, results unchanged.
fn off(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let r = mpirun(abi, 3, &[("WINDROSE_MPI", "off")], &["-1", "300000", "20"]);
    r.complete(3);
    assert!(r.windrose.values().all(|&n| n == 0), "{:?}", r.windrose);
    assert!(r.expected.values().all(|&n| n == 0));
}

/// Each tree policy runs the same checked broadcasts (the default, adapt, runs in `sweep`).
fn policies(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    for policy in ["rebuild:balanced-path", "static:binomial", "adapt:path:0.5"] {
        let r = mpirun(
            abi,
            4,
            &[
                ("WINDROSE_MPI_THRESHOLD", "1000"),
                ("WINDROSE_MPI_TREE", policy),
            ],
            &["1000", "2000000", "10"],
        );
        r.complete(4);
        assert_eq!(
            r.windrose, r.expected,
            "windrose calls per rank under {policy}"
        );
        assert!(
            r.windrose.values().all(|&n| n > 0),
            "{policy}: {:?}",
            r.windrose
        );
    }
}

/// A bad WINDROSE_MPI_TREE is an error at MPI_Init that names the variable: MPI_ERR_ARG on
/// MPI_COMM_WORLD, whose default handler ends the job.
fn bad_tree(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let (status, stdout, stderr, what) = launch(
        abi,
        3,
        &[("WINDROSE_MPI_TREE", "sideways")],
        &["1000", "300000", "2"],
    );
    assert!(!status.success(), "{what} succeeded:\n{stdout}\n{stderr}");
    assert!(
        stderr.contains("windrose-mpi: WINDROSE_MPI_TREE=sideways: tree policy \"sideways\""),
        "{stdout}\n{stderr}"
    );
    assert!(
        !stdout.contains("checked"),
        "a rank went on past MPI_Init:\n{stdout}"
    );
}

#[test]
fn openmpi_tree_policies() {
    policies(OPENMPI);
}

#[test]
fn mpich_tree_policies() {
    policies(MPICH);
}

#[test]
fn openmpi_bad_tree_policy_fails_at_init() {
    bad_tree(OPENMPI);
}

#[test]
fn mpich_bad_tree_policy_fails_at_init() {
    bad_tree(MPICH);
}

#[test]
fn standard_abi_bad_tree_policy_fails_at_init() {
    bad_tree(STANDARD);
}

/// A root sending more than the others' buffers hold: MPI_ERR_TRUNCATE at the others through
/// the communicator's error handler (MPI_ERRORS_RETURN), nothing written past their buffers,
/// the communicator usable afterwards (the program checks all that and prints truncate-ok).
fn truncate(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let mut r = mpirun(
        abi,
        3,
        &[("WINDROSE_MPI_THRESHOLD", "1000")],
        &["truncate", "2000000"],
    );
    r.truncate_ok.sort();
    assert_eq!(r.truncate_ok, [0, 1, 2], "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.stderr
            .matches("is longer than this rank's buffer (1000000 bytes)")
            .count(),
        2,
        "each non-root says why:\n{}",
        r.stderr
    );
    // The failed call is not counted; the root's two calls and the others' second are.
    assert_eq!(r.windrose.values().copied().collect::<Vec<_>>(), [2, 1, 1]);
}

/// MPI_Comm_free does not synchronise, so freeing a communicator must not wait for peers
/// (the program's rank 0 frees, then sends to rank 1, which frees after receiving).
fn free_without_waiting(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let mut r = mpirun(
        abi,
        3,
        &[("WINDROSE_MPI_THRESHOLD", "1000")],
        &["free", "300000"],
    );
    r.free_ok.sort();
    assert_eq!(r.free_ok, [0, 1, 2], "{}\n{}", r.stdout, r.stderr);
    // One broadcast on the freed communicator and five on MPI_COMM_WORLD, all windrose's.
    assert_eq!(r.windrose.values().copied().collect::<Vec<_>>(), [6, 6, 6]);
}

#[test]
fn openmpi_comm_free_does_not_wait_for_peers() {
    free_without_waiting(OPENMPI);
}

#[test]
fn mpich_comm_free_does_not_wait_for_peers() {
    free_without_waiting(MPICH);
}

#[test]
fn standard_abi_comm_free_does_not_wait_for_peers() {
    free_without_waiting(STANDARD);
}

#[test]
fn openmpi_truncation_reaches_the_error_handler() {
    truncate(OPENMPI);
}

#[test]
fn mpich_truncation_reaches_the_error_handler() {
    truncate(MPICH);
}

#[test]
fn openmpi_two_ranks_fall_back() {
    sweep(OPENMPI, 2, "300000", "20");
}

#[test]
fn openmpi_three_ranks() {
    sweep(OPENMPI, 3, "1048576", "50");
}

#[test]
fn openmpi_four_ranks_up_to_16_mib_and_300_calls_in_a_row() {
    sweep(OPENMPI, 4, "16777216", "300");
}

#[test]
fn openmpi_off() {
    off(OPENMPI);
}

#[test]
fn mpich_two_ranks_fall_back() {
    sweep(MPICH, 2, "300000", "20");
}

#[test]
fn mpich_three_ranks() {
    sweep(MPICH, 3, "1048576", "50");
}

#[test]
fn mpich_four_ranks_up_to_16_mib_and_300_calls_in_a_row() {
    sweep(MPICH, 4, "16777216", "300");
}

#[test]
fn mpich_off() {
    off(MPICH);
}

#[test]
fn standard_abi_two_ranks_fall_back() {
    sweep(STANDARD, 2, "300000", "20");
}

#[test]
fn standard_abi_three_ranks() {
    sweep(STANDARD, 3, "1048576", "50");
}

#[test]
fn standard_abi_four_ranks_up_to_16_mib_and_300_calls_in_a_row() {
    sweep(STANDARD, 4, "16777216", "300");
}

#[test]
fn standard_abi_off() {
    off(STANDARD);
}

#[test]
fn standard_abi_truncation_reaches_the_error_handler() {
    truncate(STANDARD);
}
