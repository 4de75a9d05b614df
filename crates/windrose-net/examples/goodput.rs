//! Bench binary: root -> one receiver on loopback, windrose's broadcast against a plain tokio
//! TCP copy of the same bytes, alternating in one run; prints every repetition and the medians.
//!
//! ```text
//! cargo run --release -p windrose-net --example goodput -- [--mib 1024] [--reps 5] [--segment-kib 1024] [--frame-kib 1024] [--in-process] [--probe-ms 500]
//!     [--profile-plain | --profile-windrose | --profile-encrypt]
//! ```
//!
//! The receiver runs in a process of its own (this binary, started again with `--child-*`),
//! each process with the two-worker runtime the `windrose` CLI uses: that is how the runtime is
//! deployed, one node per process. `--in-process` runs both ends in this process instead, on
//! one runtime (four busy tasks on two workers instead of two: more thread wake-ups).
//!
//! - plain: one connection, the sender `write_all`s the payload in 1 MiB slices, the receiver
//!   `read`s into a reused 1 MiB buffer and drops the bytes; timed by the receiver from the
//!   accepted connection to the last byte read.
//! - windrose: two members of a group (`host_driver::serve_group`), member 0 broadcasting to
//!   member 1, which drops what it gets; timed as the receiver's part of the collective (its
//!   machine's start to its end, as the initiator's `MemberDone` reports it), and also as the
//!   whole run (start both members, connect, handshake, announce, data, reports, leave).
//! - windrose+blake3: the same with the receiver hashing everything it is delivered
//!   (`digest_deliveries`, the check `windrose bcast` makes).
//! - windrose+auth: the same without hashing, with a group key (the Noise handshake; data in
//!   the clear).
//! - windrose+encrypt: the same, the data path encrypted too (`--encrypt`: AES-GCM records of
//!   the session's keys).
//! - windrose+prober: the same as windrose, with the member services a `group serve` member
//!   runs: heartbeats, the weather gossip and the link prober on its own lane, probing every
//!   `--probe-ms` (default 500, the members' default; a 1 GiB run lasts about a quarter of a
//!   second here, so give a shorter period to see a busier prober).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use windrose_model::{ClusterId, NodeId};
use windrose_net::auth::{GroupKey, NoiseHandshake};
use windrose_net::bootstrap::Membership;
use windrose_net::group::{Group, Member};
use windrose_net::host_driver::{group_channel, serve_group, GroupConfig, GroupEvent, GroupHandle};
use windrose_net::random_payload;
use windrose_proto::collective::{CollectiveSpec, TreeSpec};
use windrose_proto::host::AppRequest;
use windrose_proto::Report;
use windrose_trees::static_trees::chain_all;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Where the receiving end runs.
#[derive(Clone, Copy)]
enum Place {
    InProcess,
    Child,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Starts this binary again as a receiver (`mode` and its arguments); returns it and the
/// address it listens on (its first line of output).
fn spawn_child(args: &[String]) -> (Child, BufReader<ChildStdout>, String) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the receiver process");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut addr = String::new();
    out.read_line(&mut addr).unwrap();
    assert!(
        !addr.trim().is_empty(),
        "the receiver process printed no address"
    );
    (child, out, addr.trim().to_string())
}

/// The plain receiver: times from the accepted connection to the last of `len` bytes.
async fn plain_receive(listener: TcpListener, len: usize) -> Duration {
    let (mut r, _) = listener.accept().await.unwrap();
    let start = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0;
    while got < len {
        let n = r.read(&mut buf).await.unwrap();
        assert!(n > 0, "the sender closed early");
        got += n;
    }
    start.elapsed()
}

async fn plain_send(addr: std::net::SocketAddr, data: bytes::Bytes) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    for chunk in data.chunks(1 << 20) {
        s.write_all(chunk).await.unwrap();
    }
    s.shutdown().await.unwrap();
}

fn plain_copy(rt: &tokio::runtime::Runtime, data: bytes::Bytes, place: Place) -> Duration {
    let len = data.len();
    match place {
        Place::InProcess => rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let sender = tokio::spawn(plain_send(listener.local_addr().unwrap(), data));
            let t = plain_receive(listener, len).await;
            sender.await.unwrap();
            t
        }),
        Place::Child => {
            let (mut child, mut out, addr) =
                spawn_child(&["--child-plain".into(), len.to_string()]);
            rt.block_on(plain_send(addr.parse().unwrap(), data));
            let mut secs = String::new();
            out.read_line(&mut secs).unwrap();
            assert!(child.wait().unwrap().success(), "the plain receiver failed");
            Duration::from_secs_f64(secs.trim().parse().expect("the receiver's time"))
        }
    }
}

/// The two-member group of a windrose run whose root listens on `root` and receiver on
/// `receiver`.
fn group(root: String, receiver: String) -> Arc<Group> {
    let members = vec![
        Member {
            id: NodeId(0),
            addr: root,
            cluster: ClusterId(0),
        },
        Member {
            id: NodeId(1),
            addr: receiver,
            cluster: ClusterId(0),
        },
    ];
    Arc::new(Group::new("bench", members).unwrap())
}

/// Neither hashing nor a group key: the transport alone.
const PLAIN: Mode = Mode {
    verify: false,
    key: Key::None,
    services: false,
};

/// How the windrose run is set up: the receiver hashing what it gets; a group key; the
/// member services (heartbeats, gossip, the prober) running.
#[derive(Clone, Copy)]
struct Mode {
    verify: bool,
    key: Key,
    services: bool,
}

/// The group key's part.
#[derive(Clone, Copy, PartialEq)]
enum Key {
    /// The plain handshake.
    None,
    /// The Noise handshake, data in the clear (`--key-file`).
    Auth,
    /// The Noise handshake and the data path encrypted (`--key-file --encrypt`).
    Encrypt,
}

impl Key {
    /// Its name on a child's command line.
    fn name(self) -> &'static str {
        match self {
            Key::None => "none",
            Key::Auth => "auth",
            Key::Encrypt => "encrypt",
        }
    }

    fn from_name(name: &str) -> Key {
        match name {
            "auth" => Key::Auth,
            "encrypt" => Key::Encrypt,
            _ => Key::None,
        }
    }
}

/// Member `i`'s configuration: no heartbeats or probes (only the broadcast talks) unless
/// `mode.services`, the receiver hashing its deliveries when `mode.verify`.
fn member_config(group: &Arc<Group>, i: u32, mode: Mode) -> GroupConfig {
    let mut c = GroupConfig::new(Membership {
        group: group.clone(),
        me: NodeId(i),
    });
    if mode.services {
        c.probe_period = Some(Duration::from_millis(arg("--probe-ms", 500).max(1)));
    } else {
        c.heartbeat = None;
        c.probe_period = None;
        c.gossip = None;
    }
    c.digest_deliveries = mode.verify;
    if mode.key != Key::None {
        let key = GroupKey::from_bytes([1; 32]);
        let encrypt = mode.key == Key::Encrypt;
        c.handshake = Arc::new(NoiseHandshake::new(key).with_encryption(encrypt));
    }
    c
}

/// Serves member `i` on `listener` and returns its handle and task.
fn start_member(
    rt: &tokio::runtime::Runtime,
    listener: TcpListener,
    group: &Arc<Group>,
    i: u32,
    mode: Mode,
) -> (
    GroupHandle,
    tokio::task::JoinHandle<Result<(), windrose_net::NetError>>,
) {
    let (handle, ports) = group_channel();
    let task = rt.spawn(serve_group(listener, member_config(group, i, mode), ports));
    (handle, task)
}

/// The receiver: takes its events (dropping the bytes) until its part of a collective ended,
/// then leaves.
async fn receive_one(mut handle: GroupHandle) {
    while let Some(ev) = handle.events.recv().await {
        if let GroupEvent::Report(Report::CollectiveEnded { finished, .. }) = ev {
            assert!(finished, "the receiver's part did not finish");
            break;
        }
    }
    handle.request(AppRequest::Leave);
    while handle.events.recv().await.is_some() {}
}

/// One windrose broadcast to one receiver through the Host driver: (the receiver's part of
/// the collective, the whole run).
fn windrose(
    rt: &tokio::runtime::Runtime,
    data: bytes::Bytes,
    segment: u64,
    mode: Mode,
    place: Place,
) -> (Duration, Duration) {
    let wall = Instant::now();
    let l0 = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let root_addr = l0.local_addr().unwrap().to_string();
    let (group, receiver, child) = match place {
        Place::InProcess => {
            let l1 = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
            let group = group(root_addr, l1.local_addr().unwrap().to_string());
            let (handle, task) = start_member(rt, l1, &group, 1, mode);
            let receiver = rt.spawn(receive_one(handle));
            (group, Some((receiver, task)), None)
        }
        Place::Child => {
            let (child, _out, addr) = spawn_child(&[
                "--child-host".into(),
                root_addr.clone(),
                mode.verify.to_string(),
                mode.key.name().into(),
                mode.services.to_string(),
                format!("{}", arg("--probe-ms", 500)),
            ]);
            (group(root_addr, addr), None, Some(child))
        }
    };
    let (mut root, root_task) = start_member(rt, l0, &group, 0, mode);
    let spec = CollectiveSpec::Broadcast {
        tree: TreeSpec::of(&chain_all(2, NodeId(0)).unwrap()),
        segment_bytes: segment,
        max_frame_payload: (arg("--frame-kib", 1024) << 10) as u32,
    };
    let total = data.len() as u64;
    root.request(AppRequest::StartCollective {
        spec,
        data,
        transfer: None,
    });
    let mut part = None;
    rt.block_on(async {
        while let Some(ev) = root.events.recv().await {
            match ev {
                GroupEvent::Report(Report::MemberDone {
                    member: NodeId(1),
                    finished,
                    bytes_delivered,
                    digest,
                    elapsed,
                    ..
                }) => {
                    assert!(finished && bytes_delivered == total, "the receiver failed");
                    assert!(digest.is_some() == mode.verify);
                    part = elapsed;
                }
                GroupEvent::Report(Report::CollectiveComplete { failed, .. }) => {
                    assert_eq!(failed, 0);
                    break;
                }
                _ => {}
            }
        }
        root.request(AppRequest::Leave);
        while root.events.recv().await.is_some() {}
        root_task.await.unwrap().unwrap();
    });
    if let Some((receiver, task)) = receiver {
        rt.block_on(receiver).unwrap();
        rt.block_on(task).unwrap().unwrap();
    }
    if let Some(mut child) = child {
        assert!(
            child.wait().unwrap().success(),
            "the windrose receiver failed"
        );
    }
    (part.expect("the receiver's time"), wall.elapsed())
}

/// The receiving end of a `Place::Child` run: prints its address, then (plain) its time.
fn child_main(which: &str, args: &[String]) {
    let rt = runtime();
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    println!("{addr}");
    std::io::stdout().flush().unwrap();
    match which {
        "--child-plain" => {
            let t = rt.block_on(plain_receive(listener, args[0].parse().unwrap()));
            println!("{}", t.as_secs_f64());
        }
        "--child-host" => {
            let group = group(args[0].clone(), addr);
            let mode = Mode {
                verify: args[1] == "true",
                key: Key::from_name(&args[2]),
                services: args[3] == "true",
            };
            let (handle, task) = start_member(&rt, listener, &group, 1, mode);
            rt.block_on(receive_one(handle));
            rt.block_on(task).unwrap().unwrap();
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// iperf3's goodput for `len` bytes on loopback (server and client as two processes), when
/// `iperf3` is on PATH: a second baseline, from a tool built for exactly this.
fn iperf3(len: usize, port: u16) -> Option<f64> {
    let mut server = Command::new("iperf3")
        .args(["-s", "-1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut out = None;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(20));
        let run = Command::new("iperf3")
            .args([
                "-c",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-n",
                &len.to_string(),
                "-J",
            ])
            .output()
            .ok()?;
        if run.status.success() {
            out = Some(run.stdout);
            break;
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    let report: serde_json::Value = serde_json::from_slice(&out?).ok()?;
    let bits = report["end"]["sum_received"]["bits_per_second"].as_f64()?;
    Some(bits / 8e6)
}

/// User + system CPU seconds of `who` (`RUSAGE_SELF`, or `RUSAGE_CHILDREN`: the waited-for
/// children) so far.
fn cpu_of(who: libc::c_int) -> f64 {
    // SAFETY: getrusage writes one rusage struct into the zeroed value we own.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(who, &mut r) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(r.ru_utime) + tv(r.ru_stime)
}

/// User + system CPU seconds of this process and its waited-for children so far.
fn cpu_s() -> f64 {
    cpu_of(libc::RUSAGE_SELF) + cpu_of(libc::RUSAGE_CHILDREN)
}

/// CPU seconds per GB to seal and then open 256 MiB in place in records of the data path's
/// largest size (AES-256-GCM, one thread): the cipher's own share of the encrypted path.
fn aes_gcm_cpu_per_gb() -> f64 {
    use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
    let key = || LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[7; 32]).unwrap());
    let (seal, open) = (key(), key());
    let nonce = |n: u64| {
        let mut b = [0u8; 12];
        b[4..].copy_from_slice(&n.to_be_bytes());
        Nonce::assume_unique_for_key(b)
    };
    let record = windrose_net::secure::RECORD_PLAIN;
    let mut buf = vec![1u8; record + 16];
    let n = (256 << 20) / record as u64;
    let t = cpu_s();
    for i in 0..n {
        let tag = seal
            .seal_in_place_separate_tag(nonce(i), Aad::empty(), &mut buf[..record])
            .unwrap();
        buf[record..].copy_from_slice(tag.as_ref());
        open.open_in_place(nonce(i), Aad::empty(), &mut buf)
            .unwrap();
    }
    (cpu_s() - t) / (n as f64 * record as f64 / 1e9)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(mode) = args.get(1).filter(|a| a.starts_with("--child-")) {
        return child_main(mode, &args[2..]);
    }
    let mib = arg("--mib", 1024) as usize;
    let reps = arg("--reps", 5).max(1) as usize;
    let segment = arg("--segment-kib", 1024) << 10;
    let place = if args.iter().any(|a| a == "--in-process") {
        Place::InProcess
    } else {
        Place::Child
    };
    let data = random_payload(mib << 20, 42);
    let rt = runtime();
    let mb = data.len() as f64 / 1e6;
    println!(
        "root -> 1 receiver, {mib} MiB on loopback, windrose segments of {} KiB, {reps} repetitions, receiver {}",
        segment >> 10,
        match place {
            Place::InProcess => "in this process",
            Place::Child => "in its own process",
        }
    );
    if args.iter().any(|a| a == "--profile-plain") {
        // Only the plain copy, for profilers.
        for _ in 0..reps {
            let p = plain_copy(&rt, data.clone(), place);
            println!("plain {:.1} MB/s", mb / p.as_secs_f64());
        }
        return;
    }
    if args.iter().any(|a| a == "--profile-windrose") {
        // Only windrose without hashing, for profilers.
        for _ in 0..reps {
            let (w, _) = windrose(&rt, data.clone(), segment, PLAIN, place);
            println!("windrose {:.1} MB/s", mb / w.as_secs_f64());
        }
        return;
    }
    if args.iter().any(|a| a == "--profile-encrypt") {
        // Only windrose with the data path encrypted, for profilers.
        let encrypt = Mode {
            key: Key::Encrypt,
            ..PLAIN
        };
        for _ in 0..reps {
            let (s0, c0) = (cpu_of(libc::RUSAGE_SELF), cpu_of(libc::RUSAGE_CHILDREN));
            let (w, _) = windrose(&rt, data.clone(), segment, encrypt, place);
            let (s1, c1) = (cpu_of(libc::RUSAGE_SELF), cpu_of(libc::RUSAGE_CHILDREN));
            println!(
                "windrose+encrypt {:.1} MB/s; CPU s per GB: sender {:.3}, receiver {:.3}",
                mb / w.as_secs_f64(),
                (s1 - s0) / (mb / 1e3),
                (c1 - c0) / (mb / 1e3)
            );
        }
        return;
    }
    let with_iperf = iperf3(1 << 20, 5201).is_some();
    if !with_iperf {
        println!("(iperf3 not found on PATH: its column is left out)");
    }
    println!(
        "{:>4}  {:>11}  {:>11}  {:>14}  {:>14}  {:>14}  {:>17}  {:>16}  {:>22}",
        "rep",
        "plain_MB/s",
        "iperf3_MB/s",
        "windrose_MB/s",
        "wr+blake3_MB/s",
        "wr+auth_MB/s",
        "wr+encrypt_MB/s",
        "wr+prober_MB/s",
        "windrose_whole_run_MB/s"
    );
    let (mut plain, mut iperf, mut wr, mut wr_hash, mut wr_auth, mut wr_enc, mut wr_probe) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let mut wall = Vec::new();
    let (mut cpu_clear, mut cpu_enc) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let p = plain_copy(&rt, data.clone(), place);
        let i = with_iperf
            .then(|| iperf3(data.len(), 5201))
            .flatten()
            .unwrap_or(f64::NAN);
        let c0 = cpu_s();
        let (w, w_wall) = windrose(&rt, data.clone(), segment, PLAIN, place);
        let c1 = cpu_s();
        let with = |verify, key| Mode {
            verify,
            key,
            services: false,
        };
        let (h, _) = windrose(&rt, data.clone(), segment, with(true, Key::None), place);
        let (a, _) = windrose(&rt, data.clone(), segment, with(false, Key::Auth), place);
        let c2 = cpu_s();
        let (e, _) = windrose(&rt, data.clone(), segment, with(false, Key::Encrypt), place);
        let c3 = cpu_s();
        cpu_clear.push((c1 - c0) / (mb / 1e3));
        cpu_enc.push((c3 - c2) / (mb / 1e3));
        let services = Mode {
            services: true,
            ..PLAIN
        };
        let (s, _) = windrose(&rt, data.clone(), segment, services, place);
        wr_probe.push(mb / s.as_secs_f64());
        wr_auth.push(mb / a.as_secs_f64());
        wr_enc.push(mb / e.as_secs_f64());
        plain.push(mb / p.as_secs_f64());
        wr.push(mb / w.as_secs_f64());
        wr_hash.push(mb / h.as_secs_f64());
        wall.push(mb / w_wall.as_secs_f64());
        iperf.push(i);
        println!(
            "{rep:>4}  {:>11.1}  {:>11.1}  {:>14.1}  {:>14.1}  {:>14.1}  {:>17.1}  {:>16.1}  {:>22.1}",
            plain[rep],
            iperf[rep],
            wr[rep],
            wr_hash[rep],
            wr_auth[rep],
            wr_enc[rep],
            wr_probe[rep],
            wall[rep]
        );
    }
    let (p, w, h, ww) = (median(plain), median(wr), median(wr_hash), median(wall));
    println!(
        "medians: plain {p:.1} MB/s; windrose {w:.1} MB/s = {:.1} % of plain; with BLAKE3 {h:.1} MB/s = {:.1} %; whole run {ww:.1} MB/s = {:.1} %",
        100.0 * w / p,
        100.0 * h / p,
        100.0 * ww / p
    );
    let s = median(wr_probe);
    println!(
        "with the member services (prober every {} ms, heartbeats, gossip): {s:.1} MB/s = {:.1} % of plain, {:.1} % of windrose without",
        arg("--probe-ms", 500),
        100.0 * s / p,
        100.0 * s / w
    );
    let (a, e) = (median(wr_auth), median(wr_enc));
    println!(
        "with a group key: {a:.1} MB/s = {:.1} % of windrose without; encrypted data path: {e:.1} MB/s = {:.1} % of windrose in the clear, {:.1} % of plain",
        100.0 * a / w,
        100.0 * e / w,
        100.0 * e / p
    );
    let (cc, ce, aes) = (median(cpu_clear), median(cpu_enc), aes_gcm_cpu_per_gb());
    println!(
        "CPU seconds per GB (both processes): windrose {cc:.3}, encrypted {ce:.3} (+{:.3}); \
         AES-256-GCM alone (seal and open, 1 MiB records, one thread) {aes:.3}, {:.0} % of what \
         encryption adds. The clear path keeps {:.2} cores busy and the encrypted one {:.2}: \
         on no more cores than the clear path, the cipher's CPU alone would leave encryption \
         {:.0} % of the clear rate",
        ce - cc,
        100.0 * aes / (ce - cc),
        cc * w / 1e3,
        ce * e / 1e3,
        100.0 * cc / (cc + aes)
    );
    if with_iperf {
        let i = median(iperf);
        println!(
            "iperf3 {i:.1} MB/s: windrose = {:.1} % of iperf3; with BLAKE3 {:.1} %",
            100.0 * w / i,
            100.0 * h / i
        );
    }
}
