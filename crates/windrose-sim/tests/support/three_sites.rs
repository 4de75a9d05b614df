//! What the weather tests of a small group share (`weather.rs`, `weather_members.rs`): three
//! sites of three nodes, and a series of broadcasts from node 0.
#![allow(dead_code)]

use bytes::Bytes;
use windrose_model::platform::{ClusterSpec, Platform};
use windrose_model::NodeId;
use windrose_proto::host::{App, AppRequest, BroadcastRequest};
use windrose_proto::planner::TreePolicy;
use windrose_proto::Input;
use windrose_sim::engine::Simulation;

/// Three sites of three nodes (50 MB/s nodes, 0.1 ms inside), 5 MB/s and 10 ms between sites.
pub fn platform() -> Platform {
    Platform::builder()
        .cluster(ClusterSpec::uniform(3, 50e6, 1e9, 1e-4))
        .cluster(ClusterSpec::uniform(3, 50e6, 1e9, 1e-4))
        .cluster(ClusterSpec::uniform(3, 50e6, 1e9, 1e-4))
        .wan_all(5e6, 0.01)
        .build()
        .unwrap()
}

/// `bytes` bytes of a fixed pattern.
pub fn pattern(bytes: usize) -> Bytes {
    Bytes::from(
        (0..bytes)
            .map(|i| (i * 31 % 251) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// Node 0 broadcasts `data` under `policy` `count` times, every `period` seconds from t = 1 s,
/// in 64 KiB segments.
pub fn start_broadcasts(
    sim: &mut Simulation,
    policy: TreePolicy,
    data: &Bytes,
    count: usize,
    period: f64,
) {
    for k in 0..count {
        let request = AppRequest::StartBroadcast(BroadcastRequest {
            policy,
            segment_bytes: 64 << 10,
            max_frame_payload: 64 << 10,
            data: data.clone(),
            transfer: None,
        });
        sim.input_at(
            NodeId(0),
            1.0 + period * k as f64,
            Input::App(App::new(request)),
        )
        .unwrap();
    }
}
