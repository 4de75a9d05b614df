//! The WAN delay line: this kernel has no netem, so latency between clusters is added in user
//! space. In the core namespace, packets arriving from the cluster routers are routed into a
//! TUN device (policy routing: `ip rule add iif cC lookup TABLE`, `default dev wtun` in TABLE);
//! the line reads each one, holds it for the one-way latency of its (source cluster,
//! destination cluster) pair, and writes it back to the TUN, where it arrives with `iif wtun`
//! and is routed by the main table to the destination cluster.
//!
//! Packets of one pair leave in the order they came, even when the pair's latency changes
//! (a packet is never released before the one ahead of it); the table is re-read when its file
//! changes, so `windrose testbed set` and a scenario's timed changes can move latencies while a
//! run goes on. Overhead: a read, a heap push and a write per packet; measured on loopback
//! veths at about 0.1-0.3 ms per crossing (see the testbed tests).
//!
//! The line holds at most [`MAX_HELD_BYTES`] of packets: past that it drops what arrives, as a
//! router with a full buffer would, and counts the drops ([`DelayStats`], written every second
//! to [`stats_path`] for `windrose testbed status` and `testbed run`). Latencies are at most
//! [`crate::limits::MAX_LATENCY_S`], also when the config file says more.

use crate::plan::cluster_of_addr;
use crate::sys::run;
use crate::TestbedError;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// What the delay line of a testbed does, as written to its file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DelayConfig {
    /// The TUN device to create (`wtun`).
    pub tun: String,
    /// The routing table that sends packets into it.
    pub table: u32,
    /// Interfaces whose incoming packets cross the line (the core's veths to the routers).
    pub ingress: Vec<String>,
    /// One-way latency of each ordered cluster pair, seconds (`[from][to]`).
    pub latency_s: Vec<Vec<f64>>,
}

impl DelayConfig {
    /// The latency of a packet from `src` to `dst` (0 when either is outside the testbed's
    /// cluster subnets).
    pub fn delay(&self, src: std::net::Ipv4Addr, dst: std::net::Ipv4Addr) -> Duration {
        let (Some(a), Some(b)) = (cluster_of_addr(src), cluster_of_addr(dst)) else {
            return Duration::ZERO;
        };
        let s = self
            .latency_s
            .get(a.index())
            .and_then(|row| row.get(b.index()))
            .copied()
            .unwrap_or(0.0);
        // A hand-edited 1e300 (or inf, or NaN) must neither panic in `from_secs_f64` nor hold
        // packets for ever.
        let s = if s.is_nan() {
            0.0
        } else {
            s.clamp(0.0, crate::limits::MAX_LATENCY_S)
        };
        Duration::from_secs_f64(s)
    }

    /// Reads a config file.
    pub fn load(path: &Path) -> Result<DelayConfig, TestbedError> {
        let text = std::fs::read_to_string(path).map_err(|e| TestbedError::File {
            path: path.to_path_buf(),
            error: e.to_string(),
        })?;
        serde_json::from_str(&text).map_err(|e| TestbedError::File {
            path: path.to_path_buf(),
            error: format!("line {}, column {}: {e}", e.line(), e.column()),
        })
    }

    /// Writes a config file atomically (a temporary file renamed over it), so the running line
    /// never reads half of it.
    pub fn save(&self, path: &Path) -> Result<(), TestbedError> {
        let tmp = path.with_extension("tmp");
        let text = serde_json::to_string_pretty(self).expect("a delay config serializes");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| TestbedError::File {
                path: path.to_path_buf(),
                error: e.to_string(),
            })
    }
}

/// What a delay line did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelayStats {
    /// Packets passed.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Most packets held at once.
    pub max_held: usize,
    /// Packets dropped because the line already held [`MAX_HELD_BYTES`].
    #[serde(default)]
    pub dropped_packets: u64,
    /// Their bytes.
    #[serde(default)]
    pub dropped_bytes: u64,
}

/// Most bytes of packets the delay line holds at once (a router's buffer): 64 MiB, thirteen
/// times the bandwidth-delay product of a 5 MB/s WAN pair at the longest latency
/// ([`crate::limits::MAX_LATENCY_S`]), far more than any testbed scenario needs.
pub const MAX_HELD_BYTES: usize = 64 << 20;

/// Where the delay line of config file `config` writes its [`DelayStats`] (JSON, every second
/// and when it stops).
pub fn stats_path(config: &Path) -> PathBuf {
    config.with_extension("stats")
}

/// The statistics the delay line of config file `config` last wrote, if any.
pub fn load_stats(config: &Path) -> Option<DelayStats> {
    let text = std::fs::read_to_string(stats_path(config)).ok()?;
    serde_json::from_str(&text).ok()
}

/// The packets the line holds, in release order, with a bound on their bytes.
#[derive(Debug)]
pub struct HeldPackets {
    queue: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>,
    bytes: usize,
    limit: usize,
    seq: u64,
}

impl HeldPackets {
    /// An empty queue that holds at most `limit` bytes.
    pub fn new(limit: usize) -> HeldPackets {
        HeldPackets {
            queue: BinaryHeap::new(),
            bytes: 0,
            limit,
            seq: 0,
        }
    }

    /// Holds `packet` until `at`; false (the packet is dropped) when it would take the queue
    /// past its limit.
    pub fn push(&mut self, at: Instant, packet: Vec<u8>) -> bool {
        if self.bytes + packet.len() > self.limit {
            return false;
        }
        self.bytes += packet.len();
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, packet)));
        true
    }

    /// The release time of the next packet.
    pub fn next_at(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse((at, _, _))| *at)
    }

    /// The next packet if it is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.next_at()? > now {
            return None;
        }
        let Reverse((_, _, packet)) = self.queue.pop()?;
        self.bytes -= packet.len();
        Some(packet)
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Release times per packet: a packet of a pair is released at its arrival plus the pair's
/// delay, never before the previous packet of the pair (no reordering when a delay shrinks).
#[derive(Debug, Default)]
pub struct Schedule {
    last: HashMap<([u8; 4], [u8; 4]), Instant>,
}

impl Schedule {
    /// The release time of a packet of pair `(src, dst)` that arrived at `now`.
    pub fn release(
        &mut self,
        src: [u8; 4],
        dst: [u8; 4],
        now: Instant,
        delay: Duration,
    ) -> Instant {
        let at = now + delay;
        let e = self.last.entry((src, dst)).or_insert(at);
        if at > *e {
            *e = at;
        }
        *e
    }
}

/// IPv4 source and destination of a packet, if it is one.
pub fn addresses(packet: &[u8]) -> Option<([u8; 4], [u8; 4])> {
    if packet.len() < 20 || packet[0] >> 4 != 4 {
        return None;
    }
    let mut s = [0; 4];
    let mut d = [0; 4];
    s.copy_from_slice(&packet[12..16]);
    d.copy_from_slice(&packet[16..20]);
    Some((s, d))
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Creates TUN device `name` (no packet information header) in this thread's namespace.
fn open_tun(name: &str) -> Result<File, TestbedError> {
    let err = |e: String| TestbedError::Command {
        command: format!("create TUN device {name}"),
        error: e,
    };
    if name.is_empty() || name.len() > 15 {
        return Err(err("the name must have 1 to 15 characters".into()));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|e| err(format!("/dev/net/tun: {e}")))?;
    let mut req = IfReq {
        name: [0; 16],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes an ifreq, which `req` is laid out as.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) };
    if r < 0 {
        return Err(err(std::io::Error::last_os_error().to_string()));
    }
    Ok(file)
}

/// Waits up to `ms` for `file` to be readable.
fn readable(file: &File, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: file.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

struct Held {
    queue: HeldPackets,
    done: bool,
}

/// Removes the policy rules on drop (the route goes with the TUN device).
struct Rules {
    ingress: Vec<String>,
    table: u32,
}

impl Drop for Rules {
    fn drop(&mut self) {
        for i in &self.ingress {
            let _ = run(
                None,
                &[
                    "ip".into(),
                    "rule".into(),
                    "del".into(),
                    "iif".into(),
                    i.clone(),
                    "lookup".into(),
                    self.table.to_string(),
                ],
            );
        }
    }
}

/// Runs the delay line of `config` in this thread's network namespace until `stop` is set,
/// re-reading the latencies from `reload` when that file changes (and writing its statistics to
/// [`stats_path`] of it).
pub fn run_line(
    config: &DelayConfig,
    reload: Option<&Path>,
    stop: &AtomicBool,
) -> Result<DelayStats, TestbedError> {
    let tun = open_tun(&config.tun)?;
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    run(None, &s(&["ip", "link", "set", &config.tun, "up"]))?;
    run(
        None,
        &s(&["ip", "link", "set", &config.tun, "txqueuelen", "10000"]),
    )?;
    run(
        None,
        &s(&[
            "sysctl",
            "-qw",
            &format!("net.ipv4.conf.{}.rp_filter=0", config.tun),
        ]),
    )?;
    run(
        None,
        &s(&[
            "ip",
            "route",
            "replace",
            "default",
            "dev",
            &config.tun,
            "table",
            &config.table.to_string(),
        ]),
    )?;
    let _rules = Rules {
        ingress: config.ingress.clone(),
        table: config.table,
    };
    for i in &config.ingress {
        run(
            None,
            &s(&[
                "ip",
                "rule",
                "add",
                "iif",
                i,
                "lookup",
                &config.table.to_string(),
            ]),
        )?;
    }

    let held = Arc::new((
        Mutex::new(Held {
            queue: HeldPackets::new(MAX_HELD_BYTES),
            done: false,
        }),
        Condvar::new(),
    ));
    let writer_tun = tun.try_clone().map_err(|e| TestbedError::Command {
        command: "dup the TUN device".into(),
        error: e.to_string(),
    })?;
    let writer = {
        let held = held.clone();
        std::thread::spawn(move || {
            let mut tun = writer_tun;
            let (lock, cv) = &*held;
            let mut h = lock.lock().expect("delay line lock");
            loop {
                let now = Instant::now();
                if let Some(pkt) = h.queue.pop_due(now) {
                    drop(h);
                    // A full TUN queue drops the packet, as a full link would.
                    let _ = tun.write(&pkt);
                    h = lock.lock().expect("delay line lock");
                    continue;
                }
                match h.queue.next_at() {
                    Some(at) => {
                        let wait = at - now;
                        h = cv.wait_timeout(h, wait).expect("delay line lock").0;
                    }
                    None if h.done => return,
                    None => h = cv.wait(h).expect("delay line lock"),
                }
            }
        })
    };

    let mut cfg = config.clone();
    let mut stamp = reload.and_then(modified);
    let mut last_check = Instant::now();
    let mut schedule = Schedule::default();
    let mut stats = DelayStats::default();
    let stats_file = reload.map(stats_path);
    let mut written = DelayStats::default();
    let mut last_write = Instant::now();
    let mut reader = tun;
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        if let Some(path) = &stats_file {
            if stats != written && last_write.elapsed() >= Duration::from_secs(1) {
                last_write = Instant::now();
                write_stats(path, &stats);
                written = stats.clone();
            }
        }
        if let Some(path) = reload {
            if last_check.elapsed() >= Duration::from_millis(100) {
                last_check = Instant::now();
                let now_stamp = modified(path);
                if now_stamp != stamp {
                    stamp = now_stamp;
                    if let Ok(c) = DelayConfig::load(path) {
                        cfg.latency_s = c.latency_s;
                    }
                }
            }
        }
        if !readable(&reader, 100) {
            continue;
        }
        let n = match reader.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(TestbedError::Command {
                    command: format!("read from {}", cfg.tun),
                    error: e.to_string(),
                })
            }
        };
        let now = Instant::now();
        let at = match addresses(&buf[..n]) {
            Some((src, dst)) => {
                let d = cfg.delay(src.into(), dst.into());
                schedule.release(src, dst, now, d)
            }
            None => now,
        };
        let (lock, cv) = &*held;
        let mut h = lock.lock().expect("delay line lock");
        if h.queue.push(at, buf[..n].to_vec()) {
            stats.packets += 1;
            stats.bytes += n as u64;
            stats.max_held = stats.max_held.max(h.queue.len());
        } else {
            stats.dropped_packets += 1;
            stats.dropped_bytes += n as u64;
        }
        drop(h);
        cv.notify_one();
    }
    if let Some(path) = &stats_file {
        write_stats(path, &stats);
    }
    {
        let (lock, cv) = &*held;
        lock.lock().expect("delay line lock").done = true;
        cv.notify_one();
    }
    let _ = writer.join();
    Ok(stats)
}

/// Writes `stats` to `path` atomically (best effort: statistics must not stop the line).
fn write_stats(path: &Path, stats: &DelayStats) {
    let tmp = path.with_extension("stats.tmp");
    let text = serde_json::to_string(stats).expect("delay stats serialize");
    let _ = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Runs the delay line of the config file at `path` in this process's network namespace until
/// SIGTERM or SIGINT, re-reading the latencies when the file changes (the `windrose testbed
/// delay-line` process that `up` starts in the core namespace).
pub fn run_from_file(path: &Path) -> Result<DelayStats, TestbedError> {
    let config = DelayConfig::load(path)?;
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let path: PathBuf = path.to_path_buf();
    real_time_priority();
    run_line(&config, Some(&path), &STOP)
}

/// Runs this process (and the threads it starts) with a real-time priority when allowed: a
/// packet held for 10 ms should leave after 10 ms, not when a busy machine next schedules the
/// delay line (on 2 loaded cores that added 2 ms per round trip). Its threads block between
/// packets, so they cannot starve the machine. Without the privilege: a high nice value, else
/// nothing.
fn real_time_priority() {
    let param = libc::sched_param { sched_priority: 20 };
    // SAFETY: plain system calls on this process, with a valid parameter struct.
    unsafe {
        if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) != 0 {
            libc::setpriority(libc::PRIO_PROCESS, 0, -15);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_never_reorders_even_when_its_delay_shrinks() {
        let mut s = Schedule::default();
        let t0 = Instant::now();
        let (a, b) = ([10, 77, 0, 1], [10, 77, 1, 1]);
        let r1 = s.release(a, b, t0, Duration::from_millis(50));
        let r2 = s.release(
            a,
            b,
            t0 + Duration::from_millis(1),
            Duration::from_millis(5),
        );
        assert_eq!(r1, t0 + Duration::from_millis(50));
        assert_eq!(r2, r1, "held behind the packet ahead of it");
        let r3 = s.release(
            a,
            b,
            t0 + Duration::from_millis(100),
            Duration::from_millis(5),
        );
        assert_eq!(r3, t0 + Duration::from_millis(105));
        // Another pair is independent.
        let r4 = s.release(
            b,
            a,
            t0 + Duration::from_millis(1),
            Duration::from_millis(5),
        );
        assert_eq!(r4, t0 + Duration::from_millis(6));
    }

    #[test]
    fn the_held_queue_drops_past_its_bound_and_releases_in_order() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut q = HeldPackets::new(3000);
        assert!(q.push(ms(20), vec![2; 1000]));
        assert!(q.push(ms(10), vec![1; 1500]));
        // 2500 held: a 600-byte packet would make 3100, past the bound: dropped, as a full
        // router buffer drops; a smaller one still fits.
        assert!(!q.push(ms(5), vec![9; 600]));
        assert!(q.push(ms(30), vec![3; 500]));
        assert_eq!((q.len(), q.bytes()), (3, 3000));
        assert_eq!(q.pop_due(ms(9)), None, "nothing due yet");
        assert_eq!(q.pop_due(ms(10)).map(|p| p[0]), Some(1));
        assert_eq!(q.bytes(), 1500);
        assert!(q.push(ms(40), vec![4; 1500]), "room again once released");
        let rest: Vec<u8> = std::iter::from_fn(|| q.pop_due(ms(100)).map(|p| p[0])).collect();
        assert_eq!(rest, [2, 3, 4]);
        assert!(q.is_empty() && q.bytes() == 0);
    }

    #[test]
    fn a_huge_latency_in_the_file_is_held_to_the_bound_not_a_panic() {
        let c = DelayConfig {
            tun: "wtun".into(),
            table: 100,
            ingress: vec![],
            latency_s: vec![vec![f64::NAN, 1e300], vec![f64::INFINITY, 0.0]],
        };
        let max = Duration::from_secs_f64(crate::limits::MAX_LATENCY_S);
        let d = |s: [u8; 4], t: [u8; 4]| c.delay(s.into(), t.into());
        assert_eq!(d([10, 77, 0, 1], [10, 77, 1, 1]), max);
        assert_eq!(d([10, 77, 1, 1], [10, 77, 0, 1]), max);
        assert_eq!(d([10, 77, 0, 1], [10, 77, 0, 2]), Duration::ZERO, "NaN");
    }

    #[test]
    fn delays_come_from_the_cluster_pair_of_the_addresses() {
        let c = DelayConfig {
            tun: "wtun".into(),
            table: 100,
            ingress: vec!["c0".into()],
            latency_s: vec![vec![0.0, 0.01], vec![0.02, 0.0]],
        };
        let d = |s: [u8; 4], t: [u8; 4]| c.delay(s.into(), t.into());
        assert_eq!(d([10, 77, 0, 3], [10, 77, 1, 1]), Duration::from_millis(10));
        assert_eq!(d([10, 77, 1, 3], [10, 77, 0, 1]), Duration::from_millis(20));
        assert_eq!(d([10, 78, 0, 1], [10, 77, 0, 1]), Duration::ZERO);
        assert_eq!(d([10, 77, 7, 1], [10, 77, 0, 1]), Duration::ZERO);
        let mut pkt = vec![0u8; 40];
        pkt[0] = 0x45;
        pkt[12..16].copy_from_slice(&[10, 77, 0, 3]);
        pkt[16..20].copy_from_slice(&[10, 77, 1, 1]);
        assert_eq!(addresses(&pkt), Some(([10, 77, 0, 3], [10, 77, 1, 1])));
        pkt[0] = 0x60;
        assert_eq!(addresses(&pkt), None);
        assert_eq!(addresses(&pkt[..10]), None);
    }

    #[test]
    fn the_config_file_round_trips_and_names_its_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.json");
        let c = DelayConfig {
            tun: "wtun".into(),
            table: 100,
            ingress: vec!["c0".into(), "c1".into()],
            latency_s: vec![vec![0.0, 0.01], vec![0.01, 0.0]],
        };
        c.save(&p).unwrap();
        assert_eq!(DelayConfig::load(&p).unwrap(), c);
        std::fs::write(&p, "{ \"tun\": 3 }").unwrap();
        let e = DelayConfig::load(&p).unwrap_err().to_string();
        assert!(e.contains("d.json") && e.contains("line 1"), "{e}");
    }
}
