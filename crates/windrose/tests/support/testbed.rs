//! Helpers of the tests that run on the emulated testbed: whether this machine can host one,
//! a guard that takes a testbed down whatever happens, members of a long-lived group in its
//! namespaces, and the WAN byte counters.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn windrose() -> Command {
    Command::new(env!("CARGO_BIN_EXE_windrose"))
}

/// None when this machine can host a testbed; otherwise why not.
pub fn unavailable() -> Option<String> {
    windrose_testbed::sys::preflight()
        .err()
        .map(|e| e.to_string())
}

/// Takes a testbed down whatever happens in the test.
pub struct Down(pub &'static str);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = windrose_testbed::testbed::down(self.0);
    }
}

/// Runs `windrose ARGS`, which must succeed; its standard output.
pub fn ok(args: &[&str]) -> String {
    let out = windrose().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "windrose {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `testbed up SCENARIO --name NAME`.
pub fn up(name: &str, scenario: &Path) {
    ok(&["testbed", "up", "--name", name, scenario.to_str().unwrap()]);
}

/// Bytes each cluster's router sent towards each other cluster since `up` (`testbed traffic`).
pub fn wan_bytes(name: &str) -> Vec<Vec<u64>> {
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["testbed", "traffic", "--name", name, "--json"])).unwrap();
    serde_json::from_value(v["wan_bytes"].clone()).unwrap()
}

/// Long-lived group members (`group serve`), one per node namespace of a testbed; left and
/// then killed when dropped.
pub struct Members {
    pub dir: PathBuf,
    children: Vec<Child>,
}

impl Members {
    /// Members 0..n of a group at 10.77.CLUSTER.K+1:PORT (node `i` in cluster
    /// `clusters[i]`), with their control sockets and logs in `dir`; waits until every control
    /// socket is open.
    pub fn serve(testbed: &str, dir: &Path, clusters: &[u32], port: u16) -> Members {
        let group = dir.join("group.toml");
        let mut toml = format!("name = \"{testbed}\"\nprotocol_version = 2\n");
        let mut seen = std::collections::BTreeMap::<u32, u32>::new();
        for (id, &c) in clusters.iter().enumerate() {
            let k = seen.entry(c).or_default();
            *k += 1;
            toml +=
                &format!("[[node]]\nid = {id}\naddr = \"10.77.{c}.{k}:{port}\"\ncluster = {c}\n");
        }
        std::fs::write(&group, toml).unwrap();
        let mut m = Members {
            dir: dir.to_path_buf(),
            children: Vec::new(),
        };
        for i in 0..clusters.len() {
            let log = std::fs::File::create(m.log(i)).unwrap();
            let child = windrose()
                .args(["testbed", "exec", "--name", testbed, &i.to_string(), "--"])
                .arg(env!("CARGO_BIN_EXE_windrose"))
                .args(["group", "serve", "--id", &i.to_string(), "--group"])
                .arg(&group)
                .arg("--control")
                .arg(m.control(i))
                .stdout(log)
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            m.children.push(child);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(0..clusters.len()).all(|i| m.control(i).exists()) {
            assert!(
                Instant::now() < deadline,
                "members did not open their control sockets"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        m
    }

    pub fn control(&self, i: usize) -> PathBuf {
        self.dir.join(format!("c{i}.sock"))
    }

    /// Member `i`'s standard output (its reports, e.g. each tree it planned).
    pub fn log(&self, i: usize) -> PathBuf {
        self.dir.join(format!("m{i}.log"))
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            let _ = windrose()
                .args(["group", "leave", "--control"])
                .arg(self.control(i))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for c in &mut self.children {
            while c.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}
