//! Bench binary: how many small collectives per second one long-lived group runs. N member
//! *processes* on loopback join one group (`host_driver::serve_group`); member 0 (this
//! process) broadcasts `--count` payloads of `--bytes` over a binomial tree, each started when
//! the previous one completed at member 0 (every member reported), then the same count all at
//! once (`--window` in flight). Prints collectives per second and the median and 99th
//! percentile of one collective's latency (start request to completion at member 0).
//!
//! ```text
//! cargo run --release -p windrose-net --example group_rate -- [--nodes 8] [--count 1000] [--bytes 1024] [--window 32]
//! ```
//!
//! Heartbeats and probes stay on (defaults), as in a deployed group. All processes share this
//! machine's cores.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use windrose_model::{ClusterId, NodeId};
use windrose_net::bootstrap::{Bootstrap, GroupFile, Membership};
use windrose_net::group::{Group, Member};
use windrose_net::host_driver::{group_channel, serve_group, GroupConfig, GroupEvent, GroupHandle};
use windrose_net::{bind, random_payload};
use windrose_proto::collective::{CollectiveSpec, TreeSpec};
use windrose_proto::host::AppRequest;
use windrose_proto::Report;
use windrose_trees::static_trees::binomial_all;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn num_arg(name: &str, default: u64) -> u64 {
    arg(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The child side: a member that serves until the group's member 0 leaves and it is killed.
fn member_main(path: &str, id: u32) {
    let membership = GroupFile {
        path: path.into(),
        id,
    }
    .membership()
    .unwrap();
    let result = runtime().block_on(async {
        let l = bind(&membership.group, membership.me).await?;
        let (mut handle, ports) = group_channel();
        let serve = tokio::spawn(serve_group(l, GroupConfig::new(membership), ports));
        // Take the events (and keep the handle, so the member stays).
        while handle.events.recv().await.is_some() {}
        serve.await.unwrap()
    });
    if let Err(e) = result {
        eprintln!("member {id}: {e}");
        std::process::exit(1);
    }
}

fn loopback_group(n: usize) -> Group {
    let members = (0..n)
        .map(|i| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            Member {
                id: NodeId::from(i),
                addr: l.local_addr().unwrap().to_string(),
                cluster: ClusterId(0),
            }
        })
        .collect();
    Group::new("group-rate", members).unwrap()
}

/// Waits for `n` completions at member 0; returns when each arrived.
async fn completions(handle: &mut GroupHandle, n: usize) -> Vec<Instant> {
    let mut at = Vec::with_capacity(n);
    while at.len() < n {
        match tokio::time::timeout(Duration::from_secs(60), handle.events.recv()).await {
            Ok(Some(GroupEvent::Report(Report::CollectiveComplete {
                finished, failed, ..
            }))) => {
                assert_eq!(failed, 0, "a collective failed ({finished} finished)");
                at.push(Instant::now());
            }
            Ok(Some(_)) => {}
            Ok(None) => panic!("member 0 stopped"),
            Err(_) => panic!("no completion within 60 s"),
        }
    }
    at
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    if let Some(path) = arg("--member") {
        let id = num_arg("--id", 1) as u32;
        member_main(&path, id);
        return;
    }
    let nodes = num_arg("--nodes", 8) as usize;
    let count = num_arg("--count", 1000) as usize;
    let bytes = num_arg("--bytes", 1024) as usize;
    let window = num_arg("--window", 32) as usize;
    let dir = tempfile::tempdir().unwrap();
    let group = Arc::new(loopback_group(nodes));
    let file = dir.path().join("group.toml");
    std::fs::write(&file, group.to_toml()).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<Child> = (1..nodes)
        .map(|i| {
            Command::new(&exe)
                .arg("--member")
                .arg(&file)
                .arg("--id")
                .arg(i.to_string())
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let spec = CollectiveSpec::Broadcast {
        tree: TreeSpec::of(&binomial_all(nodes, NodeId(0)).unwrap()),
        segment_bytes: 64 << 10,
        max_frame_payload: 64 << 10,
    };
    let data = random_payload(bytes, 1);
    let start = |h: &GroupHandle| {
        assert!(h.request(AppRequest::StartCollective {
            spec: spec.clone(),
            data: data.clone(),
            transfer: None,
        }))
    };
    runtime().block_on(async {
        let l = bind(&group, NodeId(0)).await.unwrap();
        let (mut handle, ports) = group_channel();
        let config = GroupConfig::new(Membership {
            group: group.clone(),
            me: NodeId(0),
        });
        let serve = tokio::spawn(serve_group(l, config, ports));
        // Every member connects at start within the mesh limit; above it connections are made
        // on demand, and the warm-up makes them.
        let mut connected = 0;
        while nodes <= windrose_proto::host::MESH_LIMIT && connected < nodes - 1 {
            if let Some(GroupEvent::Connected(_)) = handle.events.recv().await {
                connected += 1;
            }
        }
        // Warm-up.
        for _ in 0..10 {
            start(&handle);
            completions(&mut handle, 1).await;
        }
        // One after the other.
        let mut lat = Vec::with_capacity(count);
        let t0 = Instant::now();
        for _ in 0..count {
            let s = Instant::now();
            start(&handle);
            let done = completions(&mut handle, 1).await[0];
            lat.push((done - s).as_secs_f64() * 1e3);
        }
        let serial_s = t0.elapsed().as_secs_f64();
        lat.sort_by(f64::total_cmp);
        println!(
            "group_rate: {nodes} member processes, {count} broadcasts of {bytes} B over a binomial tree"
        );
        println!(
            "  back to back: {:.0} collectives/s ({serial_s:.2} s); latency median {:.3} ms, p99 {:.3} ms",
            count as f64 / serial_s,
            percentile(&lat, 0.5),
            percentile(&lat, 0.99)
        );
        // A window of collectives in flight.
        let t1 = Instant::now();
        let mut issued = 0;
        let mut done = 0;
        while done < count {
            while issued < count && issued - done < window {
                start(&handle);
                issued += 1;
            }
            done += completions(&mut handle, 1).await.len();
        }
        let windowed_s = t1.elapsed().as_secs_f64();
        println!(
            "  {window} in flight: {:.0} collectives/s ({windowed_s:.2} s)",
            count as f64 / windowed_s
        );
        drop(handle);
        let _ = tokio::time::timeout(Duration::from_secs(10), serve).await;
    });
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
}
