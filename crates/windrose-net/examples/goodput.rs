//! Bench binary: root -> one receiver on loopback, windrose's broadcast against a plain tokio
//! TCP copy of the same bytes, alternating in one run; prints every repetition and the medians.
//!
//! ```text
//! cargo run --release -p windrose-net --example goodput -- [--mib 1024] [--reps 5] [--segment-kib 1024] [--frame-kib 1024]
//! ```
//!
//! - plain: one connection, the sender `write_all`s the payload in 1 MiB slices, the receiver
//!   `read`s into a reused 1 MiB buffer and drops the bytes; timed from the accepted connection
//!   to the last byte read.
//! - windrose: `run_root` + `run_node` (two nodes of one group, in this process, each with its
//!   own connections), the receiver dropping what it gets; timed from the root's Go to the
//!   receiver's finish (the node's completion time), and also as the whole run's wall time
//!   (connect, handshake, job, go, data, report, bye).
//! - windrose+blake3: the same with the receiver hashing everything (what `windrose bcast`
//!   does for its check), on the same two cores.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use windrose_model::{ClusterId, NodeId};
use windrose_net::bootstrap::Membership;
use windrose_net::group::{Group, Member};
use windrose_net::{random_payload, run_node, run_root, NodeConfig, RootJob};
use windrose_trees::static_trees::chain_all;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn plain_copy(data: bytes::Bytes) -> Duration {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let len = data.len();
    let sender = tokio::spawn(async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.set_nodelay(true).unwrap();
        for chunk in data.chunks(1 << 20) {
            s.write_all(chunk).await.unwrap();
        }
        s.shutdown().await.unwrap();
    });
    let (mut r, _) = listener.accept().await.unwrap();
    let start = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0;
    while got < len {
        let n = r.read(&mut buf).await.unwrap();
        assert!(n > 0, "the sender closed early");
        got += n;
    }
    let t = start.elapsed();
    sender.await.unwrap();
    t
}

async fn windrose(data: bytes::Bytes, segment: u64, verify: bool) -> (Duration, Duration) {
    let l1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let members = vec![
        Member {
            id: NodeId(0),
            addr: "127.0.0.1:1".into(),
            cluster: ClusterId(0),
        },
        Member {
            id: NodeId(1),
            addr: l1.local_addr().unwrap().to_string(),
            cluster: ClusterId(0),
        },
    ];
    let group = Arc::new(Group::new("bench", members).unwrap());
    let config = |i| {
        NodeConfig::new(Membership {
            group: group.clone(),
            me: NodeId(i),
        })
    };
    let wall = Instant::now();
    let mut receiver = config(1);
    receiver.verify = verify;
    let node = tokio::spawn(run_node(l1, receiver));
    let mut job = RootJob::broadcast(chain_all(2, NodeId(0)).unwrap(), segment, data);
    job.probe_period = None;
    job.max_frame_payload = (arg("--frame-kib", 1024) << 10) as u32;
    let outcome = run_root(config(0), job).await.unwrap();
    node.await.unwrap().unwrap();
    let wall = wall.elapsed();
    let n = &outcome.nodes[0];
    assert_eq!(n.bytes_received, outcome.total_len);
    assert!(n.verified || !verify, "{:?}", outcome.failures());
    let completion = outcome.nodes[0].completion_s.unwrap();
    (Duration::from_secs_f64(completion), wall)
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
    let mib = arg("--mib", 1024) as usize;
    let reps = arg("--reps", 5).max(1) as usize;
    let segment = arg("--segment-kib", 1024) << 10;
    let data = random_payload(mib << 20, 42);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mb = data.len() as f64 / 1e6;
    println!("root -> 1 receiver, {mib} MiB on loopback, windrose segments of {} KiB, {reps} repetitions", segment >> 10);
    println!(
        "{:>4}  {:>11}  {:>14}  {:>14}  {:>22}",
        "rep", "plain_MB/s", "windrose_MB/s", "wr+blake3_MB/s", "windrose_whole_run_MB/s"
    );
    let (mut plain, mut wr, mut wr_hash, mut wall) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    if std::env::args().any(|a| a == "--profile-plain") {
        // Only the plain copy, for profilers.
        for _ in 0..reps {
            let p = rt.block_on(plain_copy(data.clone()));
            println!("plain {:.1} MB/s", mb / p.as_secs_f64());
        }
        return;
    }
    if std::env::args().any(|a| a == "--profile-windrose") {
        // Only windrose without hashing, for profilers.
        for _ in 0..reps {
            let (w, _) = rt.block_on(windrose(data.clone(), segment, false));
            println!("windrose {:.1} MB/s", mb / w.as_secs_f64());
        }
        return;
    }
    for rep in 0..reps {
        let p = rt.block_on(plain_copy(data.clone()));
        let (w, w_wall) = rt.block_on(windrose(data.clone(), segment, false));
        let (h, _) = rt.block_on(windrose(data.clone(), segment, true));
        plain.push(mb / p.as_secs_f64());
        wr.push(mb / w.as_secs_f64());
        wr_hash.push(mb / h.as_secs_f64());
        wall.push(mb / w_wall.as_secs_f64());
        println!(
            "{rep:>4}  {:>11.1}  {:>14.1}  {:>14.1}  {:>22.1}",
            plain[rep], wr[rep], wr_hash[rep], wall[rep]
        );
    }
    let (p, w, h, ww) = (median(plain), median(wr), median(wr_hash), median(wall));
    println!(
        "medians: plain {p:.1} MB/s; windrose {w:.1} MB/s = {:.1} % of plain; with BLAKE3 {h:.1} MB/s = {:.1} %; whole run {ww:.1} MB/s = {:.1} %",
        100.0 * w / p,
        100.0 * h / p,
        100.0 * ww / p
    );
}
