//! Bringing a testbed up and down, and changing its links while it runs.
//!
//! Everything a testbed makes is written to its state file
//! (`/run/windrose/testbeds/NAME.json`) *before* it is made, so [`down`] removes exactly that,
//! also after `up` or a run was killed half-way: the namespaces (their veths, bridges, qdiscs
//! and the TUN device go with them) and the processes started in them. Namespaces are only
//! ever named `wr-NAME-…`; nothing else on the machine is touched.

use crate::delay_line::DelayConfig;
use crate::plan::{capacity_commands, core_ns, plan, prefix, Plan};
use crate::sys::{list_namespaces, preflight, run};
use crate::TestbedError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use windrose_model::platform::{LinkId, Platform};

/// Where testbeds keep their state files.
pub const STATE_DIR: &str = "/run/windrose/testbeds";

/// The routing table the delay line uses in the core namespace.
pub const DELAY_TABLE: u32 = 100;

/// What a testbed made, as recorded in its state file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Its name.
    pub name: String,
    /// Its namespaces (recorded before each is created).
    pub namespaces: Vec<String>,
    /// Processes started in it (killed by `down`).
    pub pids: Vec<u32>,
    /// The address of each node.
    pub node_addrs: Vec<std::net::Ipv4Addr>,
    /// The cluster of each node.
    pub node_clusters: Vec<u32>,
    /// The delay line's config file (latencies can be changed there).
    pub delay_config: Option<PathBuf>,
    /// The scenario file it was made from, when known (for `set`).
    #[serde(default)]
    pub scenario: Option<PathBuf>,
    /// The nodes' CPU quotas, when any node has one (recorded before their groups are made).
    #[serde(default)]
    pub cpu: Option<crate::cpu::Quotas>,
    /// A `windrose testbed run`'s working folder (its data file, group file and node logs, on
    /// /dev/shm where there is one), removed by `down` too: a run killed before its own
    /// cleanup would otherwise leave its data in memory.
    #[serde(default)]
    pub run_dir: Option<PathBuf>,
}

impl State {
    /// The namespace of node `node`.
    pub fn node_ns(&self, node: u32) -> String {
        crate::plan::node_ns(&self.name, windrose_model::NodeId(node))
    }

    /// Node `node`'s CPU group, if it has a quota.
    pub fn node_cgroup(&self, node: u32) -> Option<PathBuf> {
        self.cpu.as_ref()?.node_dir(&self.name, node)
    }

    /// A command run in node `node`'s namespace (`ip netns exec`) and, when the node has a
    /// CPU quota, in its group: the program is `argv[0]`.
    pub fn command_in(&self, node: u32, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.node_ns(node)]).arg(program);
        if let Some(dir) = self.node_cgroup(node) {
            crate::cpu::join_on_exec(&mut c, &dir);
        }
        c
    }
}

/// How `up` runs the delay line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DelayMode {
    /// As a background process: this executable (a `windrose` binary) with `testbed
    /// delay-line --config FILE`, in the core namespace.
    Process(PathBuf),
    /// No delay line (latencies are not emulated).
    Off,
}

/// The state file of testbed `name`.
pub fn state_path(name: &str) -> PathBuf {
    Path::new(STATE_DIR).join(format!("{name}.json"))
}

/// Writes the state file of `state.name` (atomically).
pub fn save_state(state: &State) -> Result<(), TestbedError> {
    let path = state_path(&state.name);
    std::fs::create_dir_all(STATE_DIR).map_err(|e| TestbedError::File {
        path: PathBuf::from(STATE_DIR),
        error: e.to_string(),
    })?;
    let tmp = path.with_extension("tmp");
    std::fs::write(
        &tmp,
        serde_json::to_string_pretty(state).expect("a state serializes"),
    )
    .and_then(|()| std::fs::rename(&tmp, &path))
    .map_err(|e| TestbedError::File {
        path,
        error: e.to_string(),
    })
}

/// The state of testbed `name`, if it is up.
pub fn load_state(name: &str) -> Result<Option<State>, TestbedError> {
    let path = state_path(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| TestbedError::File {
                path,
                error: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TestbedError::File {
            path,
            error: e.to_string(),
        }),
    }
}

/// Records a process started in testbed `name`, so that `down` stops it.
pub fn record_pid(name: &str, pid: u32) -> Result<(), TestbedError> {
    let mut s = load_state(name)?.ok_or_else(|| TestbedError::NotUp {
        name: name.to_string(),
    })?;
    s.pids.push(pid);
    save_state(&s)
}

/// Brings testbed `name` up for `platform`, node `i` under a CPU quota of `cpu[i]` cores when
/// given (see [`crate::cpu`]; `cpu` may be empty): see the [module docs](self). `progress`
/// hears one line per step. On any error everything made so far is removed again; so it is
/// when `cancel` becomes true (a signal handler sets it), checked between commands:
/// [`TestbedError::Interrupted`].
pub fn up(
    name: &str,
    platform: &Platform,
    cpu: &[Option<f64>],
    delay: &DelayMode,
    progress: &mut dyn FnMut(&str),
    cancel: &AtomicBool,
) -> Result<State, TestbedError> {
    let plan = plan(name, platform)?;
    if cpu.len() > platform.node_count() {
        return Err(TestbedError::TooBig {
            what: format!(
                "CPU shares for {} nodes on a platform of {}",
                cpu.len(),
                platform.node_count()
            ),
        });
    }
    crate::cpu::check_shares(cpu, crate::cpu::machine_cores())?;
    preflight()?;
    let quotas = if cpu.iter().any(Option::is_some) {
        let mut cpu = cpu.to_vec();
        cpu.resize(platform.node_count(), None);
        Some(crate::cpu::Quotas {
            controller: crate::cpu::detect()?,
            cpu,
        })
    } else {
        None
    };
    if load_state(name)?.is_some()
        || list_namespaces()?
            .iter()
            .any(|n| n.starts_with(&prefix(name)))
    {
        return Err(TestbedError::AlreadyUp {
            name: name.to_string(),
        });
    }
    let mut state = State {
        name: name.to_string(),
        namespaces: plan.namespaces.iter().map(|n| n.name.clone()).collect(),
        pids: Vec::new(),
        node_addrs: plan.node_addrs.clone(),
        node_clusters: plan.node_clusters.iter().map(|c| c.0).collect(),
        delay_config: None,
        scenario: None,
        cpu: quotas,
        run_dir: None,
    };
    save_state(&state)?;
    match build(&plan, delay, &mut state, progress, cancel) {
        Ok(()) => Ok(state),
        Err(e) => {
            let removed = down(name).map_or(0, |r| r.namespaces);
            // A signal also reaches the command running then, which fails: the signal is the
            // cause to report.
            if cancel.load(Ordering::Relaxed) {
                Err(TestbedError::Interrupted {
                    name: name.to_string(),
                    removed,
                })
            } else {
                Err(e)
            }
        }
    }
}

fn build(
    plan: &Plan,
    delay: &DelayMode,
    state: &mut State,
    progress: &mut dyn FnMut(&str),
    cancel: &AtomicBool,
) -> Result<(), TestbedError> {
    let check = || {
        if cancel.load(Ordering::Relaxed) {
            Err(TestbedError::Interrupted {
                name: plan.name.clone(),
                removed: 0,
            })
        } else {
            Ok(())
        }
    };
    progress(&format!("creating {} namespaces", plan.namespaces.len()));
    for ns in &plan.namespaces {
        check()?;
        run(
            None,
            &["ip".into(), "netns".into(), "add".into(), ns.name.clone()],
        )?;
    }
    progress(&format!(
        "wiring and shaping ({} commands)",
        plan.commands.len()
    ));
    for (ns, argv) in &plan.commands {
        check()?;
        run(ns.as_deref(), argv)?;
    }
    if let Some(q) = &state.cpu {
        check()?;
        progress(&format!(
            "CPU quotas: {} nodes, {:.2} cores in all (cgroup {})",
            q.cpu.iter().flatten().count(),
            q.total(),
            q.controller.version
        ));
        crate::cpu::create(&plan.name, q)?;
    }
    let needs_delay = plan.wan_latency_s.iter().flatten().any(|&l| l > 0.0);
    if let (true, DelayMode::Process(exe)) = (needs_delay, delay) {
        progress("starting the WAN delay line");
        let path = Path::new(STATE_DIR).join(format!("{}-delays.json", plan.name));
        let clusters = plan.wan_latency_s.len();
        let config = DelayConfig {
            tun: "wtun".into(),
            table: DELAY_TABLE,
            ingress: (0..clusters).map(|c| format!("c{c}")).collect(),
            latency_s: plan.wan_latency_s.clone(),
        };
        config.save(&path)?;
        state.delay_config = Some(path.clone());
        save_state(state)?;
        let log_path = path.with_extension("log");
        let log = std::fs::File::create(&log_path).map_err(|e| TestbedError::File {
            path: log_path.clone(),
            error: e.to_string(),
        })?;
        let core = core_ns(&plan.name);
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &core])
            .arg(exe)
            .args(["testbed", "delay-line", "--config"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        // Its own session: a Ctrl-C meant for a later command does not stop it; `down` does.
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| TestbedError::Command {
            command: format!("{} testbed delay-line", exe.display()),
            error: e.to_string(),
        })?;
        state.pids.push(child.id());
        save_state(state)?;
        // Ready when its routing rule is in place.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            check()?;
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(TestbedError::Command {
                    command: "the delay line".into(),
                    error: format!("exited with {status}: {}", log.trim()),
                });
            }
            let rules = crate::sys::output(Some(&core), &["ip", "rule", "list"])?;
            if rules.contains(&format!("lookup {DELAY_TABLE}")) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(TestbedError::Command {
                    command: "the delay line".into(),
                    error: "not ready within 10 s".into(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(())
}

/// What `down` removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Removed {
    /// Namespaces deleted.
    pub namespaces: usize,
    /// Processes stopped.
    pub processes: usize,
    /// CPU groups removed (the nodes' and the testbed's own).
    pub cgroups: usize,
    /// A run's working folder removed (see [`State::run_dir`]).
    pub run_dir: bool,
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

/// Takes testbed `name` down: stops its processes, deletes its namespaces and state. Works
/// from the state file and, as a safety net, from the `wr-NAME-` namespace prefix; a testbed
/// that is not up is not an error (nothing to remove).
pub fn down(name: &str) -> Result<Removed, TestbedError> {
    crate::plan::check_name(name)?;
    let state = load_state(name).unwrap_or(None);
    let mut removed = Removed::default();
    if let Some(s) = &state {
        for &pid in &s.pids {
            if alive(pid) {
                // SAFETY: plain kill(2) of a process this testbed started.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
                removed.processes += 1;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while s.pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for &pid in &s.pids {
            if alive(pid) {
                // SAFETY: as above.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        }
    }
    let mut names: Vec<String> = state
        .as_ref()
        .map(|s| s.namespaces.clone())
        .unwrap_or_default();
    for n in list_namespaces().unwrap_or_default() {
        if n.starts_with(&prefix(name)) && !names.contains(&n) {
            names.push(n);
        }
    }
    let present = list_namespaces().unwrap_or_default();
    for n in names.iter().filter(|n| present.contains(n)) {
        // Processes still inside (e.g. started by hand with `exec`) would keep it alive.
        if let Ok(pids) = crate::sys::output(None, &["ip", "netns", "pids", n]) {
            for pid in pids
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                // SAFETY: kill(2) of a process inside this testbed's namespace.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                removed.processes += 1;
            }
        }
        run(
            None,
            &["ip".into(), "netns".into(), "del".into(), n.clone()],
        )?;
        removed.namespaces += 1;
    }
    // After the namespaces' processes were killed: their groups are empty, or soon.
    let controller = match state.as_ref().and_then(|s| s.cpu.as_ref()) {
        Some(q) => Some(q.controller.clone()),
        None => crate::cpu::detect().ok(),
    };
    if let Some(c) = controller {
        removed.cgroups = crate::cpu::remove(name, &c)?;
    }
    if let Some(s) = &state {
        if let Some(p) = &s.delay_config {
            let _ = std::fs::remove_file(p);
            let _ = std::fs::remove_file(p.with_extension("log"));
            let _ = std::fs::remove_file(crate::delay_line::stats_path(p));
        }
        if let Some(d) = &s.run_dir {
            removed.run_dir = std::fs::remove_dir_all(d).is_ok();
        }
    }
    let _ = std::fs::remove_file(state_path(name));
    Ok(removed)
}

/// The testbeds that are up (from their state files), by name.
pub fn list() -> Result<Vec<State>, TestbedError> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(STATE_DIR) else {
        return Ok(out);
    };
    for e in dir.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json")
            && !p
                .file_stem()
                .is_some_and(|s| s.to_string_lossy().ends_with("-delays"))
        {
            if let Some(name) = p.file_stem().map(|s| s.to_string_lossy().into_owned()) {
                if let Some(s) = load_state(&name)? {
                    out.push(s);
                }
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Sets the capacity (bytes/s) and/or the one-way latency (seconds, WAN links only) of `link`
/// on testbed `name`, built from `platform` (the platform gives the other capacities the
/// shapers depend on).
pub fn set_link(
    name: &str,
    platform: &Platform,
    link: LinkId,
    bytes_s: Option<f64>,
    latency_s: Option<f64>,
) -> Result<(), TestbedError> {
    let state = load_state(name)?.ok_or_else(|| TestbedError::NotUp {
        name: name.to_string(),
    })?;
    platform
        .check_link(link)
        .map_err(|e| TestbedError::BadLink {
            link: e.to_string(),
        })?;
    let name_of = crate::limits::link_name(link);
    if let Some(b) = bytes_s {
        crate::limits::check_capacity(&format!("bytes_s of {name_of}"), b)?;
    }
    if let Some(l) = latency_s {
        crate::limits::check_latency(&format!("latency_s of {name_of}"), l)?;
    }
    if let Some(b) = bytes_s {
        for (ns, argv) in capacity_commands(name, platform, link, b) {
            run(ns.as_deref(), &argv)?;
        }
    }
    if let Some(l) = latency_s {
        let LinkId::Wan { from, to } = link else {
            return Err(TestbedError::BadLink {
                link: format!("{name_of}: only WAN links have a latency here"),
            });
        };
        let path = state.delay_config.ok_or_else(|| TestbedError::BadLink {
            link: "this testbed has no delay line (all latencies were 0)".into(),
        })?;
        let mut c = DelayConfig::load(&path)?;
        c.latency_s[from.index()][to.index()] = l;
        c.save(&path)?;
    }
    Ok(())
}
