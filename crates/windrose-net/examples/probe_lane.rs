//! Bench binary: what the link prober measures while bulk data flows, with probes on their own
//! connection (the probe lane) and behind the data. Two group members on loopback; member 0
//! broadcasts `--mib` MiB to member 1 while both probe every 20 ms; the round trips member 0
//! measured during the broadcast are summarised. Runs alternate lane and no lane `--reps`
//! times; prints every run, then the medians.
//!
//! ```text
//! cargo run --release -p windrose-net --example probe_lane -- [--mib 1024] [--reps 3]
//! ```

use std::time::{Duration, Instant};
use windrose_model::NodeId;
use windrose_net::bootstrap::Membership;
use windrose_net::group::{Group, Member};
use windrose_net::host_driver::{group_channel, serve_group, GroupConfig, GroupEvent};
use windrose_net::random_payload;
use windrose_proto::collective::{CollectiveSpec, TreeSpec};
use windrose_proto::host::AppRequest;
use windrose_proto::Report;
use windrose_trees::static_trees::binomial_all;

fn num_arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One broadcast; returns the round trips (ms) member 0 measured while it ran, and its MB/s.
async fn run(lane: bool, data: bytes::Bytes) -> (Vec<f64>, f64) {
    let mut listeners = Vec::new();
    let mut members = Vec::new();
    for i in 0..2u32 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        members.push(Member {
            id: NodeId(i),
            addr: l.local_addr().unwrap().to_string(),
            cluster: windrose_model::ClusterId(0),
        });
        listeners.push(l);
    }
    let group = std::sync::Arc::new(Group::new("probe-lane", members).unwrap());
    let mut handles = Vec::new();
    let mut tasks = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let mut c = GroupConfig::new(Membership {
            group: group.clone(),
            me: NodeId(i as u32),
        });
        c.probe_period = Some(Duration::from_millis(20));
        c.probe_lane = lane;
        let (h, ports) = group_channel();
        tasks.push(tokio::spawn(serve_group(l, c, ports)));
        handles.push(h);
    }
    let mut receiver = handles.pop().unwrap();
    let mut root = handles.pop().unwrap();
    // Member 1 takes its deliveries and drops them.
    let drain = tokio::spawn(async move { while receiver.events.recv().await.is_some() {} });
    let mut ready = 0;
    while ready < 1 + usize::from(lane) {
        match root.events.recv().await {
            Some(GroupEvent::Connected(_)) | Some(GroupEvent::LaneUp(_)) => ready += 1,
            Some(_) => {}
            None => panic!("member 0 stopped"),
        }
    }
    let len = data.len();
    let t0 = Instant::now();
    root.request(AppRequest::StartCollective {
        spec: CollectiveSpec::Broadcast {
            tree: TreeSpec::of(&binomial_all(2, NodeId(0)).unwrap()),
            segment_bytes: 1 << 20,
            max_frame_payload: 1 << 20,
        },
        data,
        transfer: None,
    });
    let mut rtts = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(120), root.events.recv()).await {
            Ok(Some(GroupEvent::Report(Report::RoundTrip { rtt, .. }))) => {
                rtts.push(rtt.as_secs_f64() * 1e3)
            }
            Ok(Some(GroupEvent::Report(Report::CollectiveComplete { .. }))) => break,
            Ok(Some(_)) => {}
            _ => panic!("the broadcast did not complete"),
        }
    }
    let mb_s = len as f64 / t0.elapsed().as_secs_f64() / 1e6;
    drop(root);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
    }
    drain.abort();
    (rtts, mb_s)
}

fn main() {
    let mib = num_arg("--mib", 1024) as usize;
    let reps = num_arg("--reps", 3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let data = random_payload(mib << 20, 7);
    let mut med = [Vec::new(), Vec::new()];
    let mut p90 = [Vec::new(), Vec::new()];
    let mut answered = [Vec::new(), Vec::new()];
    println!("probe_lane: {mib} MiB broadcast between two members on loopback, probes every 20 ms");
    for rep in 0..reps {
        for (k, lane) in [true, false].into_iter().enumerate() {
            let (mut rtts, mb_s) = rt.block_on(run(lane, data.clone()));
            answered[k].push(rtts.len() as f64);
            if rtts.is_empty() {
                println!(
                    "  rep {rep} lane={lane}: no probe answered during the run ({mb_s:.0} MB/s)"
                );
                continue;
            }
            rtts.sort_by(f64::total_cmp);
            let m = rtts[rtts.len() / 2];
            let p = rtts[(rtts.len() * 9 / 10).min(rtts.len() - 1)];
            println!(
                "  rep {rep} lane={lane}: {} round trips during the run, median {m:.3} ms, p90 {p:.3} ms, max {:.3} ms; {mb_s:.0} MB/s",
                rtts.len(),
                rtts[rtts.len() - 1]
            );
            med[k].push(m);
            p90[k].push(p);
        }
    }
    for (k, name) in ["probe lane", "behind the data"].iter().enumerate() {
        if !med[k].is_empty() {
            println!(
                "{name:>16}: {:.0} round trips answered during a run (median), median of medians {:.3} ms, median p90 {:.3} ms",
                median(&mut answered[k]),
                median(&mut med[k]),
                median(&mut p90[k])
            );
        }
    }
}
