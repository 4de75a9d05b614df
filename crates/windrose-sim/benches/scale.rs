//! Bench binary: the simulator at scale (issue 20). For every protocol and N = 64, 256, ...
//! 16,384 nodes in 4 equal clusters (the seed-002 fast WAN links, 10 ms one way, 10 Gbit/s
//! nodes), 64 MiB from node 0 in 256 KiB pieces or segments, prints the engine events, the
//! wall time, the setup time (to the first simulated millisecond), events per wall second,
//! peak memory and (multicasts) the fraction of the max-flow bound.
//!
//! ```text
//! cargo bench -p windrose-sim --bench scale [-- --max-n 1024 --runs 3 --protocols mob,binomial
//!                                              --mib 64 --budget-s 600 --no-huge-pages]
//! ```
//!
//! Each run is a child process (this binary with `--child PROTOCOL N [--log FILE] [--progress] [--setup]`), so its peak memory is
//! its own VmHWM from `/proc/self/status` (Linux; `-` elsewhere) and a run past `--budget-s`
//! wall seconds can be stopped (printed as `timeout`; larger N of that protocol are skipped).
//! Wall times are medians of `--runs`. Without `--bench` (`cargo test --benches`) it runs one
//! small smoke (N = 64, every protocol, 4 MiB) in-process.
//!
//! **Huge pages.** The children run with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` unless the
//! caller set `GLIBC_TUNABLES` itself or passed `--no-huge-pages` (the children then inherit
//! the environment as it is): glibc's allocator then asks the kernel for transparent huge pages (2 MiB) for its
//! heap. Past N = 4,096 a run's state is hundreds of megabytes read at random, one cache line
//! per connection, node or message, and with 4 KiB pages nearly every such read also misses
//! the TLB. MOB, 4 clusters, 64 MiB, `/usr/bin/time ./scale --child mob N --mib 64` with and
//! without the setting, same binary, both runs at once: see the README's scale section. It
//! changes no result (the simulator reads no address), only where the memory comes from; other
//! C libraries ignore the variable. To measure one run by hand as the bench does, set the
//! variable on the `--child` command line.

mod support;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{arg, median};
use windrose_proto::multicast::MulticastProtocol;
use windrose_sim::scenario::{parse_scenario, run_scenario_with, Progress};
use windrose_trees::TreeAlgorithm;

/// The tree broadcasts the bench runs (those that read no costs), as `tree-ALGO`.
const TREES: [TreeAlgorithm; 3] = [
    TreeAlgorithm::Binomial,
    TreeAlgorithm::Magpie,
    TreeAlgorithm::Chain,
];

/// Every multicast by its registered name, then the tree broadcasts as `tree-ALGO`.
fn protocols() -> Vec<String> {
    MulticastProtocol::ALL
        .iter()
        .map(|p| p.name().to_string())
        .chain(TREES.iter().map(|t| format!("tree-{}", t.name())))
        .collect()
}

/// The scenario text: 4 clusters of `n / 4` nodes, the seed-002 fast WAN links.
fn scenario(protocol: &str, n: usize, mib: u64) -> String {
    let mut s = String::from("name = \"scale\"\nseed = 1\n[platform]\n");
    for _ in 0..4 {
        s += &format!(
            "[[platform.cluster]]\nnodes = {}\nnode_uplink_bytes_s = 1.25e9\n\
             node_downlink_bytes_s = 1.25e9\naccess_up_bytes_s = 1.25e9\n\
             access_down_bytes_s = 1.25e9\nintra_latency_s = 1e-4\n",
            n / 4
        );
    }
    s += "[platform.wan]\n\
          bytes_s = [[0, 3.5e6, 3.0e6, 3.0e6], [3.5e6, 0, 4.5e6, 5.0e6], \
          [3.0e6, 4.5e6, 0, 4.0e6], [3.0e6, 5.0e6, 4.0e6, 0]]\n\
          latency_s = [[0, 0.01, 0.01, 0.01], [0.01, 0, 0.01, 0.01], \
          [0.01, 0.01, 0, 0.01], [0.01, 0.01, 0.01, 0]]\n[workload]\nroot = 0\n";
    s += &format!("message_bytes = \"{mib}MiB\"\n");
    match protocol.strip_prefix("tree-") {
        Some(tree) => {
            s += &format!(
                "protocol = \"broadcast\"\ntree = \"{tree}\"\nsegment_bytes = \"256KiB\"\n"
            )
        }
        None => {
            s += &format!(
                "kind = \"multicast\"\nprotocol = \"{protocol}\"\npiece_bytes = \"256KiB\"\n"
            )
        }
    }
    s
}

/// Peak resident memory of this process, KiB (None where `/proc` has no VmHWM).
fn peak_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// One run in this process: `events wall_s peak_kib fraction setup_s` on one line (`setup_s`:
/// wall seconds to the first progress callback, i.e. parsing, the bound, the machines and the
/// first simulated millisecond); with `log`, the
/// event log is written there (to compare two builds' runs line by line); with `progress`,
/// simulated time, engine events and wall seconds go to stderr every 10 wall seconds (to
/// extrapolate a run too long to finish); with `setup`, the process prints
/// `setup WALL_S PEAK_KIB EVENTS` and exits at the first progress callback (after the first
/// millisecond of simulated time), to measure the setup alone (under `/usr/bin/time`).
fn child(
    protocol: &str,
    n: usize,
    mib: u64,
    log: Option<&Path>,
    progress: bool,
    setup: bool,
) -> String {
    let text = scenario(protocol, n, mib);
    let t = Instant::now();
    let s = parse_scenario(&text, Path::new("scale.toml")).expect("the scale scenario parses");
    let mut file = log.map(|p| {
        std::io::BufWriter::new(std::fs::File::create(p).expect("the log file can be created"))
    });
    let mut last = Instant::now();
    let mut setup_s: Option<f64> = None;
    let mut tell = |p: &Progress| {
        setup_s.get_or_insert_with(|| t.elapsed().as_secs_f64());
        if setup {
            println!(
                "setup {:.6} {} {}",
                t.elapsed().as_secs_f64(),
                peak_kib().map_or("-".to_string(), |k| k.to_string()),
                p.events
            );
            std::process::exit(0);
        }
        if progress && last.elapsed() >= Duration::from_secs(10) {
            last = Instant::now();
            eprintln!(
                "progress: simulated {:.3} s, {} of {} nodes ended, {} events, {:.1} wall s, \
                 peak {} KiB",
                p.time_s,
                p.nodes_ended,
                p.nodes,
                p.events,
                t.elapsed().as_secs_f64(),
                peak_kib().map_or("-".to_string(), |k| k.to_string())
            );
        }
    };
    let report = run_scenario_with(
        &s,
        1,
        file.as_mut().map(|f| f as &mut dyn std::io::Write),
        &mut tell,
    )
    .expect("the scale scenario runs");
    drop(file);
    let wall = t.elapsed().as_secs_f64();
    assert!(
        report.all_finished(),
        "{protocol} at N = {n}: not every node finished"
    );
    let fraction = report
        .multicast
        .first()
        .and_then(|m| m.fraction_of_bound)
        .map_or("-".to_string(), |f| format!("{:.3}", f));
    let peak = peak_kib().map_or("-".to_string(), |k| k.to_string());
    let setup_s = setup_s.unwrap_or(wall);
    format!("{} {wall:.6} {peak} {fraction} {setup_s:.6}", report.events)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let protocol = &args[i + 1];
        let n: usize = args[i + 2].parse().expect("N");
        let mib = arg(&args, "--mib", 64u64);
        let log = args
            .iter()
            .position(|a| a == "--log")
            .map(|i| Path::new(&args[i + 1]));
        let progress = args.iter().any(|a| a == "--progress");
        let setup = args.iter().any(|a| a == "--setup");
        println!("{}", child(protocol, n, mib, log, progress, setup));
        return;
    }
    // `cargo test --benches` runs this without `--bench`: a smoke at N = 64, in-process.
    if !args.iter().any(|a| a == "--bench") {
        for p in protocols() {
            let line = child(&p, 64, 4, None, false, false);
            println!("smoke {p} N=64 4 MiB: {line}");
        }
        return;
    }
    let max_n = arg(&args, "--max-n", 16_384usize);
    let runs = arg(&args, "--runs", 1usize).max(1);
    let mib = arg(&args, "--mib", 64u64);
    let budget = Duration::from_secs_f64(arg(&args, "--budget-s", 600.0f64));
    let list = arg(&args, "--protocols", protocols().join(","));
    let me = std::env::current_exe().expect("this binary's path");
    // See "Huge pages" in the docs above.
    let huge_pages = !args.iter().any(|a| a == "--no-huge-pages")
        && std::env::var_os("GLIBC_TUNABLES").is_none();
    println!(
        "4 clusters, {mib} MiB from node 0 in 256 KiB pieces/segments; medians of {runs} run(s), \
         budget {:.0} s per run; huge pages {}",
        budget.as_secs_f64(),
        if huge_pages {
            "asked"
        } else {
            "as the environment says"
        }
    );
    println!(
        "{:>14} {:>6} {:>10} {:>9} {:>9} {:>12} {:>9} {:>8}",
        "protocol", "N", "events", "wall s", "setup s", "events/s", "peak MB", "bound"
    );
    for protocol in list.split(',').filter(|p| !p.is_empty()) {
        let mut n = 64;
        while n <= max_n {
            let mut walls = Vec::new();
            let mut setups = Vec::new();
            let mut last: Option<Vec<String>> = None;
            let mut timed_out = false;
            for _ in 0..runs {
                let mut c = Command::new(&me);
                if huge_pages {
                    c.env("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1");
                }
                let mut c = c
                    .args([
                        "--child",
                        protocol,
                        &n.to_string(),
                        "--mib",
                        &mib.to_string(),
                    ])
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("spawn a child run");
                let t = Instant::now();
                loop {
                    if c.try_wait().expect("child status").is_some() {
                        break;
                    }
                    if t.elapsed() > budget {
                        let _ = c.kill();
                        let _ = c.wait();
                        timed_out = true;
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                if timed_out {
                    break;
                }
                let out = c.wait_with_output().expect("child output");
                let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
                let f: Vec<String> = line.split_whitespace().map(str::to_string).collect();
                if !out.status.success() || f.len() != 5 {
                    println!("{protocol:>14} {n:>6} failed: {line}");
                    timed_out = true;
                    break;
                }
                walls.push(f[1].parse::<f64>().unwrap_or(f64::NAN));
                setups.push(f[4].parse::<f64>().unwrap_or(f64::NAN));
                last = Some(f);
            }
            if timed_out {
                println!(
                    "{protocol:>14} {n:>6} timeout or failure (budget {:.0} s): larger N skipped",
                    budget.as_secs_f64()
                );
                break;
            }
            let f = last.expect("at least one run");
            let events: f64 = f[0].parse().unwrap_or(f64::NAN);
            let wall = median(&mut walls);
            let setup = median(&mut setups);
            let peak = f[2]
                .parse::<f64>()
                .map_or("-".to_string(), |k| format!("{:.0}", k / 1024.0));
            println!(
                "{protocol:>14} {n:>6} {:>10} {wall:>9.3} {setup:>9.3} {:>12.0} {peak:>9} {:>8}",
                f[0],
                events / wall,
                f[3]
            );
            n *= 4;
        }
    }
}
