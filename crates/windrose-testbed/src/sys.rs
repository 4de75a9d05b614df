//! The few system operations a testbed needs: running `ip`/`tc`/`sysctl` (in a namespace or
//! not), checking that namespaces can be made, and running Rust code inside a namespace.

use crate::TestbedError;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;

/// Runs `argv` in namespace `ns` (through `ip netns exec`) or in the host's, failing with the
/// command and its standard error.
pub fn run(ns: Option<&str>, argv: &[String]) -> Result<(), TestbedError> {
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).args(argv);
            c
        }
        None => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    let shown = || {
        let cmd = argv.join(" ");
        match ns {
            Some(ns) => format!("[{ns}] {cmd}"),
            None => cmd,
        }
    };
    let out = c.output().map_err(|e| TestbedError::Command {
        command: shown(),
        error: e.to_string(),
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(TestbedError::Command {
            command: shown(),
            error: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Runs `argv` and returns its standard output.
pub fn output(ns: Option<&str>, argv: &[&str]) -> Result<String, TestbedError> {
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).args(argv);
            c
        }
        None => {
            let mut c = Command::new(argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    let out = c.output().map_err(|e| TestbedError::Command {
        command: argv.join(" "),
        error: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(TestbedError::Command {
            command: argv.join(" "),
            error: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The named network namespaces of the host (`ip netns list`).
pub fn list_namespaces() -> Result<Vec<String>, TestbedError> {
    let text = output(None, &["ip", "netns", "list"])?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// Why this machine cannot host a testbed, if it cannot: not root, no `ip`/`tc`, or
/// namespaces that cannot be created (checked by creating and deleting one).
pub fn preflight() -> Result<(), TestbedError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(TestbedError::Unavailable {
            why: "a testbed needs root (network namespaces, traffic control): run it with sudo"
                .into(),
        });
    }
    for tool in ["ip", "tc", "sysctl"] {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
            .unwrap_or(false);
        if !found {
            return Err(TestbedError::Unavailable {
                why: format!("`{tool}` is not installed (Debian: apt-get install iproute2 procps)"),
            });
        }
    }
    let probe = format!("wr-probe-{}", std::process::id());
    run(
        None,
        &["ip".into(), "netns".into(), "add".into(), probe.clone()],
    )
    .map_err(|e| TestbedError::Unavailable {
        why: format!("network namespaces cannot be created here: {e}"),
    })?;
    let _ = run(None, &["ip".into(), "netns".into(), "del".into(), probe]);
    Ok(())
}

/// Runs `f` on a new thread that has entered network namespace `ns` (sockets it opens live
/// there), and returns its result.
pub fn in_netns<T, F>(ns: &str, f: F) -> Result<T, TestbedError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let handle = spawn_in_netns(ns, f)?;
    join(ns, handle)
}

/// Waits for a thread of [`spawn_in_netns`].
pub fn join<T>(ns: &str, handle: std::thread::JoinHandle<Option<T>>) -> Result<T, TestbedError> {
    match handle.join() {
        Ok(Some(v)) => Ok(v),
        _ => Err(TestbedError::Command {
            command: format!("a task in namespace {ns}"),
            error: "it panicked".into(),
        }),
    }
}

/// Starts `f` on a new thread inside network namespace `ns` (its result is `None` only if the
/// thread could not enter the namespace, which this function reports as an error).
pub fn spawn_in_netns<T, F>(
    ns: &str,
    f: F,
) -> Result<std::thread::JoinHandle<Option<T>>, TestbedError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let path = format!("/run/netns/{ns}");
    let file = File::open(&path).map_err(|e| TestbedError::Command {
        command: format!("open {path}"),
        error: e.to_string(),
    })?;
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        // SAFETY: setns on a valid namespace fd affects only this thread (it does not share
        // its network namespace with the others after the call).
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        let ok = r == 0;
        let _ = tx.send(if ok {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().to_string())
        });
        // Never run `f` in the wrong namespace.
        ok.then(f)
    });
    match rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => Err(TestbedError::Command {
            command: format!("setns into {ns}"),
            error: e,
        }),
        Err(_) => Err(TestbedError::Command {
            command: format!("setns into {ns}"),
            error: "the thread died".into(),
        }),
    }
}
