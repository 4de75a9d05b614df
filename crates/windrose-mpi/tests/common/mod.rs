//! What the MPI tests share: the ABIs, their launchers, the shim and the C program built
//! for each, and reading what a run printed.
#![allow(dead_code)] // each test binary uses a part

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
pub struct Abi {
    pub name: &'static str,
    pub mpicc: &'static str,
    /// The launcher: a name on PATH, or (with `beside`) the one next to `mpicc`.
    pub mpirun: &'static str,
    pub beside: bool,
    /// What installs it.
    pub install: &'static str,
}

pub const OPENMPI: Abi = Abi {
    name: "openmpi",
    mpicc: "mpicc.openmpi",
    mpirun: "mpirun.openmpi",
    beside: false,
    install: "apt-get install openmpi-bin libopenmpi-dev",
};
pub const MPICH: Abi = Abi {
    name: "mpich",
    mpicc: "mpicc.mpich",
    mpirun: "mpiexec.mpich",
    beside: false,
    install: "apt-get install mpich libmpich-dev",
};
/// The MPI 5 standard ABI: MPICH 5's libmpi_abi, its mpicc_abi and its own hydra.
pub const STANDARD: Abi = Abi {
    name: "standard",
    mpicc: "mpicc_abi",
    mpirun: "mpiexec.hydra",
    beside: true,
    install: "pip install mpich==5.0.2, its bin directory on PATH",
};

/// A run that takes longer than this is stuck: it is killed and the test fails (a guard
/// against hangs, not a timing assertion).
pub const HANG_GUARD: Duration = Duration::from_secs(600);

pub fn find(exe: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(exe))
            .find(|f| f.is_file())
    })
}

/// This ABI's launcher.
pub fn launcher(abi: Abi) -> Option<PathBuf> {
    if abi.beside {
        let dir = find(abi.mpicc)?.parent()?.to_path_buf();
        Some(dir.join(abi.mpirun)).filter(|p| p.is_file())
    } else {
        find(abi.mpirun)
    }
}

/// False (after saying why) when this ABI's MPI is not installed.
pub fn available(abi: Abi) -> bool {
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
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary lives in <target>/<profile>/deps")
        .to_path_buf()
}

pub fn run_checked(cmd: &mut Command, what: &str) {
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
pub fn shim(abi: Abi) -> PathBuf {
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
        let abis = profile_dir()
            .parent()
            .expect("a target directory")
            .join("windrose-mpi-abi");
        let target = abis.join(abi.name);
        seed_from_another_abi(&abis, &target);
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

/// A first build of an ABI's shim starts from a copy of another ABI's target directory, when
/// one exists: only windrose-mpi differs between them (its build script reruns for the
/// changed WINDROSE_MPI_ABI), so cargo rebuilds that crate and reuses every dependency, which
/// a build from nothing compiles again (most of the time of a first `cargo test` here). The
/// copy keeps modification times (`cp -a`), which cargo's freshness checks compare; whatever
/// it finds stale it builds again.
fn seed_from_another_abi(abis: &Path, target: &Path) {
    if target.exists() {
        return;
    }
    let built = [OPENMPI, MPICH, STANDARD]
        .iter()
        .map(|a| abis.join(a.name))
        .find(|d| d.join("release").join("libwindrose_mpi.so").is_file());
    if let Some(from) = built {
        // Under another name first: an interrupted copy is never taken for a whole one.
        let partial = target.with_extension("copying");
        let _ = std::fs::remove_dir_all(&partial);
        run_checked(
            Command::new("cp").arg("-a").arg(&from).arg(&partial),
            &format!("cp -a {} {}", from.display(), partial.display()),
        );
        std::fs::rename(&partial, target).expect("the copied target directory renamed");
    }
}

/// tests/c/bcast_check.c built with `abi`'s wrapper (once per test binary, as the shim: every
/// launch used to compile it again).
pub fn program(abi: Abi) -> PathBuf {
    static BUILT: OnceLock<Mutex<BTreeMap<&'static str, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = built.get(abi.name) {
        return p.clone();
    }
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
    built.insert(abi.name, exe.clone());
    exe
}

/// What one run printed: per rank, the calls the program expects on windrose's path, the
/// calls it checked, and the shim's count of windrose calls.
#[derive(Debug, Default)]
pub struct RunResult {
    pub expected: BTreeMap<u32, u64>,
    pub checked: BTreeMap<u32, u64>,
    pub windrose: BTreeMap<u32, u64>,
    /// Ranks that printed `truncate-ok`.
    pub truncate_ok: Vec<u32>,
    /// Ranks that printed `free-ok`.
    pub free_ok: Vec<u32>,
    /// Per rank that printed `nonblocking-ok`: its MPI_Ibcast and MPI_Bcast_init calls.
    pub nonblocking_ok: BTreeMap<u32, (u64, u64)>,
    /// Per rank: the shim's count of calls it forwarded to PMPI (Ibcast, Bcast_init).
    pub passthrough: BTreeMap<u32, u64>,
    /// Per rank: the most hosts a communicator spanned (hosts mode; 0 otherwise).
    pub hosts: BTreeMap<u32, u64>,
    /// Everything printed, for messages.
    pub stdout: String,
    pub stderr: String,
}

impl RunResult {
    /// Asserts every one of `ranks` printed its three lines.
    pub fn complete(&self, ranks: u32) {
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
pub fn launch(
    abi: Abi,
    ranks: u32,
    env: &[(&str, &str)],
    args: &[&str],
) -> (std::process::ExitStatus, String, String, String) {
    launch_guarded(abi, ranks, env, args, HANG_GUARD)
}

/// [`launch`], the launcher killed (and the test failed) after `guard`.
pub fn launch_guarded(
    abi: Abi,
    ranks: u32,
    env: &[(&str, &str)],
    args: &[&str],
    guard: Duration,
) -> (std::process::ExitStatus, String, String, String) {
    launch_exe(abi, ranks, env, &program(abi), args, guard)
}

/// [`launch_guarded`] of another program, `exe`.
pub fn launch_exe(
    abi: Abi,
    ranks: u32,
    env: &[(&str, &str)],
    exe: &Path,
    args: &[&str],
    guard: Duration,
) -> (std::process::ExitStatus, String, String, String) {
    let shim = shim(abi);
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
    cmd.arg(exe).args(args);
    let what = format!(
        "{} -np {ranks} {} {}",
        abi.mpirun,
        exe.display(),
        args.join(" ")
    );
    wait_guarded(cmd, what, guard, exe == program(abi).as_path())
}

/// An MPMD launch (`-np N1 env ... program : -np N2 env ... program`): every part runs the
/// program with the shim preloaded, `WINDROSE_MPI_STATS=path` and its own extra environment
/// (set through `env`, so each part's differs whatever the launcher's own options do).
pub fn launch_parts(
    abi: Abi,
    parts: &[(u32, &[(&str, &str)])],
    args: &[&str],
    guard: Duration,
) -> (std::process::ExitStatus, String, String, String) {
    let shim = shim(abi);
    let exe = program(abi);
    let mut cmd = Command::new(launcher(abi).expect("checked by available"));
    if abi.name == "openmpi" {
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            .env("OMPI_MCA_mpi_yield_when_idle", "1");
    } else {
        cmd.args(["-launcher", "fork"]);
    }
    let mut what = abi.mpirun.to_string();
    for (i, (ranks, env)) in parts.iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
            what.push_str(" :");
        }
        cmd.args(["-np", &ranks.to_string(), "env"]);
        cmd.arg(format!("LD_PRELOAD={}", shim.display()));
        cmd.arg("WINDROSE_MPI_STATS=path");
        what.push_str(&format!(" -np {ranks} env"));
        for (k, v) in env.iter() {
            cmd.arg(format!("{k}={v}"));
            what.push_str(&format!(" {k}={v}"));
        }
        cmd.arg(&exe).args(args);
        what.push_str(&format!(" {} {}", exe.display(), args.join(" ")));
    }
    wait_guarded(cmd, what, guard, true)
}

/// A job that prints no `init-ok` line (the test program's first words, right after
/// `MPI_Init`) within this long is stuck in the MPI library's own start-up: MPICH 5's
/// standard-ABI build was seen hanging in its PMPI_Init (every rank there, in gdb; the srun
/// tests meet it too), before any of the shim's code runs. Far above a start-up on a loaded
/// machine; a false alarm only runs the job again.
const INIT_GUARD: Duration = Duration::from_secs(60);

/// Runs `cmd`, killing it (and failing the test) after `guard`. A run past its guard fails
/// with what it printed, the launcher's process tree, and each process's threads' stacks
/// (gdb, where installed), so a hang seen once in CI can be read rather than guessed. With
/// `init_ok` (the test program, which says `init-ok` past MPI_Init), a job stuck before any
/// rank said it is reported and run once more (see [`INIT_GUARD`]).
fn wait_guarded(
    cmd: Command,
    what: String,
    guard: Duration,
    init_ok: bool,
) -> (std::process::ExitStatus, String, String, String) {
    match run_guarded(&cmd, &what, guard, init_ok.then_some(INIT_GUARD)) {
        Ok(r) => r,
        Err(stuck) => {
            eprintln!("{what}: no rank got past MPI_Init within {INIT_GUARD:?}; running it once more. What the stuck job showed:\n{stuck}");
            run_guarded(&cmd, &what, guard, None).unwrap_or_else(|_| unreachable!())
        }
    }
}

/// One run of `cmd` (see [`wait_guarded`]); Err with the stuck job's state when `init`
/// passed without an `init-ok` line.
fn run_guarded(
    cmd: &Command,
    what: &str,
    guard: Duration,
    init: Option<Duration>,
) -> Result<(std::process::ExitStatus, String, String, String), String> {
    let mut fresh = Command::new(cmd.get_program());
    fresh.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => fresh.env(k, v),
            None => fresh.env_remove(k),
        };
    }
    let before = mpi_shm_segments();
    let mut child = fresh
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let launcher = child.id();
    let _segments = RemoveNewSegments(before);
    let collect = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        let buf = std::sync::Arc::new(Mutex::new(Vec::new()));
        let into = buf.clone();
        let reader = std::thread::spawn(move || {
            let Some(mut pipe) = pipe else { return };
            let mut chunk = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                into.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        (buf, reader)
    };
    use std::io::Read;
    let (out, out_reader) = collect(child.stdout.take().map(|p| Box::new(p) as _));
    let (err, err_reader) = collect(child.stderr.take().map(|p| Box::new(p) as _));
    let text = |b: &Mutex<Vec<u8>>| String::from_utf8_lossy(&b.lock().unwrap()).into_owned();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the launcher's status") {
            break status;
        }
        let stuck_at_init =
            init.is_some_and(|i| started.elapsed() > i && !text(&out).contains("init-ok"));
        if stuck_at_init || started.elapsed() > guard {
            let tree = process_tree(launcher);
            let state = hung_state(&tree);
            // The launcher and everything under it (hydra's proxies leave its process group).
            for (pid, _) in &tree {
                let _ = Command::new("kill")
                    .args(["-KILL", pid])
                    .stderr(Stdio::null())
                    .status();
            }
            let _ = child.wait();
            let _ = (out_reader.join(), err_reader.join());
            let report = format!(
                "--- stdout\n{}\n--- stderr\n{}\n{state}",
                text(&out),
                text(&err)
            );
            if stuck_at_init {
                return Err(report);
            }
            panic!("{what} did not end within {guard:?}: killed.\n{report}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = (out_reader.join(), err_reader.join());
    Ok((status, text(&out), text(&err), what.to_string()))
}

/// The MPI libraries' shared-memory segments in /dev/shm: MPICH's `mpich_shm_*` and Open
/// MPI's `vader_segment*` / `sm_segment*`. A job that aborts (the tests' refused plans, killed
/// ranks, truncations) never unlinks its own, and they are memory: about 7 MB a job, which
/// a CI machine's small /dev/shm would run out of.
fn mpi_shm_segments() -> std::collections::BTreeSet<PathBuf> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name().is_some_and(|n| {
                        let n = n.to_string_lossy();
                        ["mpich_shm_", "vader_segment", "sm_segment"]
                            .iter()
                            .any(|s| n.starts_with(s))
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Removes, when the job is over (the value dropped after the launcher ended or was killed
/// with its tree), the segments that were not there before it started. The MPI tests run one
/// job at a time (`serial`), so they are that job's.
struct RemoveNewSegments(std::collections::BTreeSet<PathBuf>);

impl Drop for RemoveNewSegments {
    fn drop(&mut self) {
        for p in mpi_shm_segments().difference(&self.0) {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `root` and its descendants: (pid, its `ps` line).
fn process_tree(root: u32) -> Vec<(String, String)> {
    let Ok(out) = Command::new("ps")
        .args(["-e", "-o", "pid=,ppid=,stat=,wchan:32=,args="])
        .output()
    else {
        return Vec::new();
    };
    let all: Vec<(String, String, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            Some((
                words.next()?.to_string(),
                words.next()?.to_string(),
                l.trim().to_string(),
            ))
        })
        .collect();
    let mut tree = vec![root.to_string()];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i].clone();
        tree.extend(all.iter().filter(|p| p.1 == parent).map(|p| p.0.clone()));
        i += 1;
    }
    tree.into_iter()
        .filter_map(|pid| all.iter().find(|p| p.0 == pid).map(|p| (pid, p.2.clone())))
        .collect()
}

/// The processes of a hung run and, with gdb installed, every thread's stack.
fn hung_state(tree: &[(String, String)]) -> String {
    let mut state = String::from("--- processes (pid ppid stat wchan args)\n");
    for (_, line) in tree {
        state.push_str(line);
        state.push('\n');
    }
    if find("gdb").is_none() {
        return state + "(no gdb: no stacks)\n";
    }
    for (pid, _) in tree {
        let stacks = Command::new("gdb")
            .args(["-p", pid, "-batch", "-nx", "-ex", "thread apply all bt 30"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_else(|e| format!("(gdb: {e})\n"));
        state.push_str(&format!("--- stacks of {pid}\n{stacks}"));
    }
    state
}

/// Runs the program (see [`launch`]), which must succeed, and reads what it printed.
pub fn mpirun(abi: Abi, ranks: u32, env: &[(&str, &str)], args: &[&str]) -> RunResult {
    let (status, stdout, stderr, what) = launch(abi, ranks, env, args);
    assert!(
        status.success(),
        "{what} failed ({status}):\n{stdout}\n{stderr}"
    );
    RunResult::parse(stdout, stderr)
}

impl RunResult {
    /// Reads what a run of the program printed.
    pub fn parse(stdout: String, stderr: String) -> RunResult {
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
                    r.passthrough.insert(num(3) as u32, num(13));
                    // The counters keep their places; what the rank planned follows them.
                    r.hosts.insert(num(3) as u32, num(16));
                }
                ["truncate-ok", ..] => r.truncate_ok.push(num(1) as u32),
                ["free-ok", ..] => r.free_ok.push(num(1) as u32),
                ["nonblocking-ok", ..] => {
                    r.nonblocking_ok.insert(num(1) as u32, (num(2), num(3)));
                }
                _ => {}
            }
        }
        r.stdout = stdout;
        r.stderr = stderr;
        r
    }
}

/// One MPI run at a time: the tests share a small machine, and each run uses every core.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}
