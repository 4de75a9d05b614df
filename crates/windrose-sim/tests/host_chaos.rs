//! The chaos suite through the Host's session: for a tree broadcast and the MOB, BitTorrent and
//! MagPIe multicasts, seeded runs on random small platforms (see `support/chaos.rs`) in which
//! member 0 starts the collective through its host, 1 to 3 other members fail at random times
//! and about half of them restart a while later with a fresh host (which joins again and is
//! announced the running collective, rejoining it). Every run must end with no refused input;
//! member 0 must report the collective complete once, with every member counted; every member
//! that never failed, and every restarted member taken back into the collective, must finish
//! holding exactly the root's bytes. `WINDROSE_CHAOS_RUNS=N` and `WINDROSE_CHAOS_SEED=S` as in
//! the other chaos suites.

use crate::support::chaos;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use windrose_model::platform::Platform;
use windrose_model::NodeId;
use windrose_proto::collective::{CollectiveSpec, ManifestSpec, MulticastParams, TreeSpec};
use windrose_proto::host::{Host, HostConfig};
use windrose_proto::multicast::MulticastProtocol;
use windrose_proto::pieces::Manifest;
use windrose_proto::Report;
use windrose_sim::engine::{MemoryLog, RunLimits, SimConfig};
use windrose_sim::group::{group, members_of, start_input};
use windrose_sim::multicast::spec_for;
use windrose_trees::static_trees::binomial_all;

#[derive(Copy, Clone, Debug)]
enum Kind {
    Broadcast,
    Multicast(MulticastProtocol),
}

struct Case {
    platform: Platform,
    data: Bytes,
    piece_bytes: u32,
    failures: Vec<(NodeId, f64)>,
    restarts: Vec<(NodeId, f64)>,
    limit_s: f64,
}

fn case(seed: u64) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x686f_7374);
    let (platform, slowest) = chaos::random_platform(&mut rng);
    let piece_bytes = rng.gen_range(1024..=16 * 1024u32);
    let pieces = rng.gen_range(8..=64u32);
    let len =
        (pieces - 1) as usize * piece_bytes as usize + rng.gen_range(1..=piece_bytes) as usize;
    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
    let span_s = len as f64 / slowest + 0.5;
    let n = platform.node_count();
    let k = rng.gen_range(1..=3usize).min(n - 1);
    let mut victims: Vec<NodeId> = Vec::new();
    while victims.len() < k {
        let v = NodeId(rng.gen_range(1..n as u32));
        if !victims.contains(&v) {
            victims.push(v);
        }
    }
    let failures: Vec<(NodeId, f64)> = victims
        .into_iter()
        .map(|v| (v, rng.gen_range(0.0..span_s)))
        .collect();
    let mut restarts = Vec::new();
    for &(v, at) in &failures {
        if rng.gen_bool(0.5) {
            restarts.push((v, at + rng.gen_range(0.0..0.1 * (span_s - 0.5) + 0.02)));
        }
    }
    Case {
        platform,
        data: Bytes::from(data),
        piece_bytes,
        failures,
        restarts,
        limit_s: 50.0 * span_s + 2000.0,
    }
}

fn spec(kind: Kind, c: &Case) -> CollectiveSpec {
    let n = c.platform.node_count();
    match kind {
        Kind::Broadcast => CollectiveSpec::Broadcast {
            tree: TreeSpec::of(&binomial_all(n, NodeId(0)).unwrap()),
            segment_bytes: u64::from(c.piece_bytes),
            max_frame_payload: c.piece_bytes,
        },
        Kind::Multicast(p) => {
            let mspec = spec_for(p, &c.platform, NodeId(0)).unwrap();
            CollectiveSpec::Multicast {
                protocol: p,
                params: MulticastParams::of(&mspec),
                manifest: ManifestSpec::of(&Manifest::build(&c.data, c.piece_bytes).unwrap()),
            }
        }
    }
}

fn run_case(kind: Kind, seed: u64) -> Result<usize, String> {
    let c = case(seed);
    let n = c.platform.node_count();
    let config = SimConfig {
        record_deliveries: true,
        limits: RunLimits {
            max_time_s: Some(c.limit_s),
            max_events: Some(50_000_000),
        },
        ..SimConfig::default()
    };
    // The engine tells every member of a failure at once; heartbeats are off so that the run
    // ends when the collective has (silence detection has its own tests).
    let quiet = |h: &mut HostConfig| h.heartbeat = None;
    let mut sim = group(c.platform.clone(), config, seed, quiet).map_err(|e| e.to_string())?;
    sim.input_at(
        NodeId(0),
        0.0,
        start_input(spec(kind, &c), c.data.clone(), None),
    )
    .map_err(|e| e.to_string())?;
    for &(v, at) in &c.failures {
        sim.fail_node_at(v, at).map_err(|e| e.to_string())?;
    }
    let members = members_of(&c.platform);
    for &(v, at) in &c.restarts {
        let mut h = HostConfig::new(v, members.clone(), seed);
        quiet(&mut h);
        let host = Host::new(h).map_err(|e| e.to_string())?;
        sim.restart_node_at(Box::new(host), at)
            .map_err(|e| e.to_string())?;
    }
    let log = chaos::log_path().map(|_| MemoryLog::new());
    if let Some(l) = &log {
        sim.set_event_log(Box::new(l.clone()));
    }
    let result = sim.run();
    if let (Some(l), Some(path)) = (&log, chaos::log_path()) {
        std::fs::write(path, l.contents()).map_err(|e| e.to_string())?;
    }
    let m = result.map_err(|e| format!("the run did not end: {e}"))?;
    if !m.errors.is_empty() {
        return Err(format!("refused inputs: {:?}", m.errors));
    }
    let root_reports: Vec<Report> = m.nodes[0].reports.iter().map(|r| r.report).collect();
    let complete: Vec<(u32, u32)> = root_reports
        .iter()
        .filter_map(|r| match *r {
            Report::CollectiveComplete {
                finished, failed, ..
            } => Some((finished, failed)),
            _ => None,
        })
        .collect();
    if complete.len() != 1 || complete[0].0 + complete[0].1 != n as u32 {
        return Err(format!("member 0 reported {complete:?} for {n} members"));
    }
    let t = root_reports
        .iter()
        .find_map(|r| match *r {
            Report::CollectiveStarted { transfer, .. } => Some(transfer),
            _ => None,
        })
        .ok_or("no collective started")?;
    let rejoined: Vec<NodeId> = root_reports
        .iter()
        .filter_map(|r| match *r {
            Report::PeerRejoined { peer, .. } => Some(peer),
            _ => None,
        })
        .collect();
    let mut must_finish = 0u32;
    for i in 1..n {
        let node = NodeId::from(i);
        let failed = c.failures.iter().any(|f| f.0 == node);
        if failed && !rejoined.contains(&node) {
            continue;
        }
        if rejoined.contains(&node) {
            // Taken back, but the root's machine may have ended (every other member done)
            // before the rejoining machine's first request reached it: then it is told the run
            // ended, as in the runtime.
            let ended = |n: usize| {
                m.nodes[n]
                    .reports
                    .iter()
                    .rev()
                    .find_map(|r| match r.report {
                        Report::CollectiveEnded { transfer, finished } if transfer == t => {
                            Some((r.at_s, finished))
                        }
                        _ => None,
                    })
            };
            if let (Some((root_s, true)), Some((node_s, false))) = (ended(0), ended(i)) {
                if root_s <= node_s {
                    continue;
                }
            }
        }
        must_finish += 1;
        let mut got = Vec::with_capacity(c.data.len());
        for (offset, bytes) in sim.delivered_of(node, t) {
            if offset as usize != got.len() {
                return Err(format!(
                    "node {node}: delivery at {offset}, expected {}",
                    got.len()
                ));
            }
            got.extend_from_slice(&bytes);
        }
        if got[..] != c.data[..] {
            return Err(format!(
                "node {node} (rejoined: {}) holds {} bytes, not the root's {}",
                rejoined.contains(&node),
                got.len(),
                c.data.len()
            ));
        }
    }
    if complete[0].0 < must_finish + 1 {
        return Err(format!(
            "member 0 counted {} finished, {} members must have",
            complete[0].0,
            must_finish + 1
        ));
    }
    Ok(rejoined.len())
}

fn chaos(kind: Kind) {
    let seeds = chaos::seeds();
    let mut failed = Vec::new();
    let mut rejoined = 0;
    for &seed in &seeds {
        match run_case(kind, seed) {
            Ok(r) => rejoined += r,
            Err(e) => failed.push(format!("seed {seed}: {e}")),
        }
    }
    eprintln!(
        "{kind:?} through the host: {} runs, {rejoined} members rejoined",
        seeds.len()
    );
    chaos::assert_no_failures(&format!("{kind:?}"), &failed, seeds.len());
    // The swarms' roots serve until every member is done, so restarted members are taken
    // back; a tree's root ends once it has sent everything, and a member that restarts after
    // that is left out (counted failed).
    let swarm = matches!(
        kind,
        Kind::Multicast(MulticastProtocol::Mob | MulticastProtocol::BitTorrent)
    );
    if seeds.len() >= 100 && swarm {
        assert!(
            rejoined >= seeds.len() / 10,
            "{kind:?}: only {rejoined} rejoins"
        );
    }
}

#[test]
fn broadcast_through_the_host_survives_failures_and_restarts() {
    chaos(Kind::Broadcast);
}

#[test]
fn mob_through_the_host_survives_failures_and_restarts() {
    chaos(Kind::Multicast(MulticastProtocol::Mob));
}

#[test]
fn bittorrent_through_the_host_survives_failures_and_restarts() {
    chaos(Kind::Multicast(MulticastProtocol::BitTorrent));
}

#[test]
fn magpie_through_the_host_survives_failures_and_restarts() {
    chaos(Kind::Multicast(MulticastProtocol::Magpie));
}
