//! Node compute speeds on a testbed: each node namespace's processes run in a cgroup of their
//! own under a CPU quota, its share of a core from the scenario's `[compute]` table (see
//! `windrose_sim::scenario`'s "Node speeds").
//!
//! Network namespaces do not limit CPU, so the quota is a cgroup's: the cgroup v1 `cpu`
//! controller (`cpu.cfs_quota_us` over `cpu.cfs_period_us`) where the machine mounts it, else
//! cgroup v2's `cpu.max` where its unified hierarchy offers `cpu` ([`detect`]). A testbed's
//! groups are `windrose-NAME/nI` under the controller's mount, made by `up` after they are
//! recorded in the state file and removed by `down` (processes still in them are moved back to
//! the root group first, so nothing is left behind). A process joins its node's group in the
//! child between fork and exec ([`join_on_exec`]), so everything it starts is limited too.

use crate::TestbedError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The quota's period, microseconds (the kernel's default CFS period).
pub const PERIOD_US: u64 = 100_000;

/// The smallest share a testbed gives a node: 1 ms per period, the kernel's smallest quota.
pub const MIN_CPU: f64 = 0.01;

/// Which cgroup interface limits CPU here.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    /// cgroup v1's `cpu` controller: `cpu.cfs_quota_us` and `cpu.cfs_period_us`.
    V1,
    /// cgroup v2: `cpu.max`.
    V2,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        })
    }
}

/// Where this machine's CPU controller is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Controller {
    /// Its interface.
    pub version: Version,
    /// The hierarchy's mount point (its root group).
    pub mount: PathBuf,
}

/// What a testbed's quotas are, as recorded in its state file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quotas {
    /// The controller they are made with.
    pub controller: Controller,
    /// Each node's share of a core (None: unthrottled, no group).
    pub cpu: Vec<Option<f64>>,
}

impl Quotas {
    /// The testbed's group (parent of its nodes' groups).
    pub fn testbed_dir(&self, name: &str) -> PathBuf {
        self.controller.mount.join(format!("windrose-{name}"))
    }

    /// Node `node`'s share of a core, if it has a quota.
    pub fn share(&self, node: u32) -> Option<f64> {
        self.cpu.get(node as usize).copied().flatten()
    }

    /// Node `node`'s group, if it has a quota.
    pub fn node_dir(&self, name: &str, node: u32) -> Option<PathBuf> {
        self.share(node)
            .map(|_| self.testbed_dir(name).join(format!("n{node}")))
    }

    /// The sum of the shares, cores.
    pub fn total(&self) -> f64 {
        self.cpu.iter().flatten().sum()
    }
}

/// The CPU controller of this machine: cgroup v1's `cpu` if mounted, else cgroup v2's if its
/// root offers `cpu`; an error saying which was looked for otherwise.
pub fn detect() -> Result<Controller, TestbedError> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| TestbedError::File {
        path: "/proc/self/mountinfo".into(),
        error: e.to_string(),
    })?;
    let mut v2 = None;
    for line in info.lines() {
        // `ID PARENT MAJ:MIN ROOT MOUNT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTS`
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let (Some(mount), mut r) = (left.split(' ').nth(4), right.split(' ')) else {
            continue;
        };
        let (fstype, _, opts) = (r.next(), r.next(), r.next().unwrap_or(""));
        match fstype {
            Some("cgroup") if opts.split(',').any(|o| o == "cpu") => {
                return Ok(Controller {
                    version: Version::V1,
                    mount: PathBuf::from(mount),
                })
            }
            Some("cgroup2") if v2.is_none() => {
                let controllers =
                    std::fs::read_to_string(Path::new(mount).join("cgroup.controllers"))
                        .unwrap_or_default();
                if controllers.split_whitespace().any(|c| c == "cpu") {
                    v2 = Some(Controller {
                        version: Version::V2,
                        mount: PathBuf::from(mount),
                    });
                }
            }
            _ => {}
        }
    }
    v2.ok_or_else(|| TestbedError::Unavailable {
        why: "no cgroup CPU controller here (neither a cgroup v1 `cpu` mount nor `cpu` in \
              cgroup v2's cgroup.controllers), so node CPU quotas cannot be set"
            .into(),
    })
}

/// Online CPU cores of this machine.
pub fn machine_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Checks the shares a testbed would give: each at least [`MIN_CPU`], finite, and their sum
/// within `cores` (quotas beyond the machine would not be the speeds the scenario asks).
pub fn check_shares(cpu: &[Option<f64>], cores: usize) -> Result<(), TestbedError> {
    for (i, &c) in cpu.iter().enumerate() {
        if let Some(c) = c {
            if !(c.is_finite() && c >= MIN_CPU) {
                return Err(crate::limits::out_of_range(
                    format!("compute: cpu of node {i}"),
                    c,
                    format!(
                        "a testbed's quotas are at least {MIN_CPU} of a core (1 ms per {} ms period)",
                        PERIOD_US / 1000
                    ),
                ));
            }
        }
    }
    let sum: f64 = cpu.iter().flatten().sum();
    if sum > cores as f64 + 1e-9 {
        return Err(crate::limits::out_of_range(
            "compute: the sum of the nodes' cpu shares",
            sum,
            format!(
                "the quotas must fit this machine's {cores} cores (else the nodes do not get \
                 the speeds the scenario gives them)"
            ),
        ));
    }
    Ok(())
}

/// The quota of `cpu` cores per [`PERIOD_US`], microseconds.
pub fn quota_us(cpu: f64) -> u64 {
    (cpu * PERIOD_US as f64).round() as u64
}

fn write(path: &Path, text: &str) -> Result<(), TestbedError> {
    std::fs::write(path, text).map_err(|e| TestbedError::File {
        path: path.to_path_buf(),
        error: format!("writing {text:?}: {e}"),
    })
}

fn mkdir(path: &Path) -> Result<(), TestbedError> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(TestbedError::File {
            path: path.to_path_buf(),
            error: format!("creating the cgroup: {e}"),
        }),
    }
}

/// Makes testbed `name`'s groups with their quotas.
pub fn create(name: &str, q: &Quotas) -> Result<(), TestbedError> {
    if q.cpu.iter().all(Option::is_none) {
        return Ok(());
    }
    let top = q.testbed_dir(name);
    if q.controller.version == Version::V2 {
        write(&q.controller.mount.join("cgroup.subtree_control"), "+cpu")?;
    }
    mkdir(&top)?;
    if q.controller.version == Version::V2 {
        write(&top.join("cgroup.subtree_control"), "+cpu")?;
    }
    for (i, c) in q.cpu.iter().enumerate() {
        let (Some(c), Some(dir)) = (c, q.node_dir(name, i as u32)) else {
            continue;
        };
        mkdir(&dir)?;
        match q.controller.version {
            Version::V1 => {
                write(&dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
                write(&dir.join("cpu.cfs_quota_us"), &quota_us(*c).to_string())?;
            }
            Version::V2 => write(
                &dir.join("cpu.max"),
                &format!("{} {PERIOD_US}", quota_us(*c)),
            )?,
        }
    }
    Ok(())
}

/// The processes in group `dir`.
pub fn procs(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Removes testbed `name`'s groups under `controller` (those of the state file and any other
/// `nI` left there); processes still in them are moved to the root group. Returns how many
/// groups were removed.
pub fn remove(name: &str, controller: &Controller) -> Result<usize, TestbedError> {
    let top = controller.mount.join(format!("windrose-{name}"));
    if !top.is_dir() {
        return Ok(0);
    }
    let root_procs = controller.mount.join("cgroup.procs");
    let mut removed = 0;
    let children: Vec<PathBuf> = std::fs::read_dir(&top)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    for dir in children.iter().chain(std::iter::once(&top)) {
        // A process killed a moment ago may still be leaving the group: a few tries.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            for pid in procs(dir) {
                // A process that exits meanwhile cannot be moved: not an error.
                let _ = std::fs::write(&root_procs, pid.to_string());
            }
            match std::fs::remove_dir(dir) {
                Ok(()) => break,
                Err(e) if std::time::Instant::now() >= deadline => {
                    return Err(TestbedError::File {
                        path: dir.clone(),
                        error: format!("removing the cgroup: {e}"),
                    })
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        }
        removed += 1;
    }
    Ok(removed)
}

/// CPU time the processes of group `dir` were held back by its quota: (periods throttled,
/// seconds throttled), from its `cpu.stat`.
pub fn throttled(dir: &Path, version: Version) -> Option<(u64, f64)> {
    let text = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
    };
    let periods = get("nr_throttled ")?;
    let seconds = match version {
        Version::V1 => get("throttled_time ")? as f64 * 1e-9,
        Version::V2 => get("throttled_usec ")? as f64 * 1e-6,
    };
    Some((periods, seconds))
}

/// Makes the child of `cmd` join group `dir` between fork and exec (it writes 0, "this
/// process", to the group's `cgroup.procs`), so the command and all it starts are limited.
/// Spawning fails with the kernel's error if it cannot join.
pub fn join_on_exec(cmd: &mut std::process::Command, dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    let path = std::ffi::CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
        .expect("a cgroup path has no NUL byte");
    // SAFETY: between fork and exec the closure calls only open, write and close, which are
    // async-signal-safe, on a path allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let r = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if r == 1 {
                Ok(())
            } else {
                Err(err)
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_checked_one_by_one_and_against_the_cores() {
        check_shares(&[Some(0.25), None, Some(1.0), Some(0.75)], 2).unwrap();
        let e = check_shares(&[Some(1.5), Some(0.75)], 2)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "compute: the sum of the nodes' cpu shares = 2.25 is out of range: the quotas must \
             fit this machine's 2 cores (else the nodes do not get the speeds the scenario gives \
             them)"
        );
        let e = check_shares(&[None, Some(0.001)], 2)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("compute: cpu of node 1 = 0.001 is out of range: a testbed's quotas are at least 0.01"),
            "{e}"
        );
        assert_eq!(quota_us(0.0625), 6250);
    }

    #[test]
    fn groups_are_named_by_testbed_and_node() {
        let q = Quotas {
            controller: Controller {
                version: Version::V1,
                mount: "/sys/fs/cgroup/cpu".into(),
            },
            cpu: vec![Some(0.5), None, Some(0.25)],
        };
        assert_eq!(
            q.node_dir("tb", 2).unwrap(),
            Path::new("/sys/fs/cgroup/cpu/windrose-tb/n2")
        );
        assert_eq!(q.node_dir("tb", 1), None);
        assert_eq!(q.node_dir("tb", 7), None);
        assert_eq!(q.total(), 0.75);
    }
}
