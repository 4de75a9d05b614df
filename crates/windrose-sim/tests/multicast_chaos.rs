//! Receivers that crash mid-multicast, and some that come back (issue 8): for each of MOB,
//! BitTorrent, Balanced Multicasting and MagPIe, 1000 seeded runs on random small platforms
//! (2-4 clusters of 2-6 nodes, random capacities and latencies, random piece sizes, 8-64
//! pieces) in which 1 to 3 random receivers fail at random times, and about half of them
//! restart a random while later with a random part of the pieces they held (as read back from
//! disk; one of them sometimes corrupted, which the machine must refuse). Every run must end
//! within a bounded simulated time, with no refused input; every node that did not fail must
//! finish holding exactly the root's bytes, and so must every restarted node, unless the run
//! was already over when it came back (then it ends with "the run ended"). A failing case prints its seed; `WINDROSE_CHAOS_RUNS=N` changes the number of
//! runs, `WINDROSE_CHAOS_SEED=S` runs only seed S (with `WINDROSE_CHAOS_LOG=FILE`, its event
//! log is written to FILE).

use crate::support::chaos;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use windrose_model::platform::Platform;
use windrose_model::NodeId;
use windrose_proto::TransferId;
use windrose_sim::engine::{MemoryLog, RunLimits, SimConfig};
use windrose_sim::metrics::NodeOutcome;
use windrose_sim::multicast::{prepare, spec_for, MulticastProtocol, SharedData};

/// One chaos case, from its seed.
#[derive(Debug)]
struct Case {
    platform: Platform,
    data: Bytes,
    piece_bytes: u32,
    failures: Vec<(NodeId, f64)>,
    /// Restarts: node, time, the pieces it kept, whether one kept piece is corrupted.
    restarts: Vec<(NodeId, f64, Vec<u32>, bool)>,
    /// A time by which the run must have ended (simulated seconds).
    limit_s: f64,
}

fn case(seed: u64) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (platform, slowest) = chaos::random_platform(&mut rng);
    let piece_bytes = rng.gen_range(1024..=16 * 1024u32);
    let pieces = rng.gen_range(8..=64u32);
    let len =
        (pieces - 1) as usize * piece_bytes as usize + rng.gen_range(1..=piece_bytes) as usize;
    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
    // About how long a run takes: every byte over the slowest WAN link, plus round trips.
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
            // Soon enough, mostly, to come back while the run goes on.
            let back = at + rng.gen_range(0.0..0.1 * (span_s - 0.5) + 0.02);
            let keep = rng.gen_range(0.0..1.0);
            let kept: Vec<u32> = (0..pieces).filter(|_| rng.gen_bool(keep)).collect();
            let corrupt = !kept.is_empty() && rng.gen_bool(0.25);
            restarts.push((v, back, kept, corrupt));
        }
    }
    Case {
        platform,
        data: Bytes::from(data),
        piece_bytes,
        failures,
        restarts,
        // Stall timers (MOB 60 s, BitTorrent's request timeouts) may be needed after a
        // failure; a run still stuck after this long hangs.
        limit_s: 50.0 * span_s + 2000.0,
    }
}

/// Restarted nodes of a case: how many finished, how many came back after the end.
#[derive(Default)]
struct Rejoins {
    finished: usize,
    too_late: usize,
}

/// Runs one case; an error says what went wrong.
fn run_case(protocol: MulticastProtocol, seed: u64) -> Result<Rejoins, String> {
    let c = case(seed);
    let root = NodeId(0);
    let shared = SharedData::new(c.data.clone(), c.piece_bytes).map_err(|e| e.to_string())?;
    let spec = spec_for(protocol, &c.platform, root).map_err(|e| e.to_string())?;
    let config = SimConfig {
        record_deliveries: true,
        limits: RunLimits {
            max_time_s: Some(c.limit_s),
            max_events: Some(50_000_000),
        },
        ..SimConfig::default()
    };
    let (mut sim, probe) = prepare(
        &c.platform,
        root,
        &shared,
        &spec,
        seed,
        TransferId(9),
        config,
    )
    .map_err(|e| e.to_string())?;
    for &(v, at) in &c.failures {
        sim.fail_node_at(v, at).map_err(|e| e.to_string())?;
    }
    let piece = c.piece_bytes as usize;
    for (v, at, kept, corrupt) in &c.restarts {
        let held = kept
            .iter()
            .enumerate()
            .map(|(j, &i)| {
                let start = i as usize * piece;
                let end = (start + piece).min(c.data.len());
                let mut bytes = c.data.slice(start..end);
                if *corrupt && j == 0 {
                    let mut v = bytes.to_vec();
                    v[0] ^= 0x5a;
                    bytes = Bytes::from(v);
                }
                (i, bytes)
            })
            .collect();
        probe
            .restart_at(&mut sim, *v, *at, held)
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
    let root_done_s = m.node(root).and_then(|r| r.finished_at_s);
    let mut rejoins = Rejoins::default();
    for i in 0..c.platform.node_count() {
        let node = NodeId::from(i);
        let restart = c.restarts.iter().find(|r| r.0 == node);
        if c.failures.iter().any(|f| f.0 == node) && restart.is_none() {
            continue;
        }
        let nm = m.node(node).ok_or("no metrics")?;
        if let Some(r) = restart {
            if nm.restarts.len() != 1 {
                return Err(format!("node {node} restarted {} times", nm.restarts.len()));
            }
            // Over when it came back, or while its first message to the root was on its way.
            let late = root_done_s.is_some_and(|d| d <= r.1 + 0.1);
            if late && nm.outcome != NodeOutcome::Finished {
                if nm.abort_reason.as_deref() != Some("the run ended before this node rejoined it")
                {
                    return Err(format!(
                        "node {node} came back at {} s after the end and ended {:?} ({:?})",
                        r.1, nm.outcome, nm.abort_reason
                    ));
                }
                rejoins.too_late += 1;
                continue;
            }
            rejoins.finished += 1;
        }
        if nm.outcome != NodeOutcome::Finished {
            return Err(format!(
                "node {node} ended {:?} ({:?})",
                nm.outcome, nm.abort_reason
            ));
        }
        if node == root {
            continue;
        }
        let mut got = Vec::with_capacity(c.data.len());
        for (offset, bytes) in sim.delivered(node) {
            if *offset as usize != got.len() {
                return Err(format!(
                    "node {node}: delivery at {offset}, expected {}",
                    got.len()
                ));
            }
            got.extend_from_slice(bytes);
        }
        if got[..] != c.data[..] {
            return Err(format!(
                "node {node} holds {} bytes that are not the root's {}",
                got.len(),
                c.data.len()
            ));
        }
    }
    Ok(rejoins)
}

fn chaos(protocol: MulticastProtocol) {
    let seeds = chaos::seeds();
    let mut failed = Vec::new();
    let mut total = Rejoins::default();
    for &seed in &seeds {
        match run_case(protocol, seed) {
            Ok(r) => {
                total.finished += r.finished;
                total.too_late += r.too_late;
            }
            Err(e) => failed.push(format!(
                "seed {seed}: {e}\n  case: {:?}",
                case(seed).failures
            )),
        }
    }
    eprintln!(
        "{protocol}: {} runs, {} restarted nodes finished, {} came back after the end",
        seeds.len(),
        total.finished,
        total.too_late
    );
    chaos::assert_no_failures(&protocol.to_string(), &failed, seeds.len());
    // The restarts must have been exercised (failures drawn after a quick run's end come
    // back after it too, so not all of them can finish).
    if seeds.len() >= 100 {
        assert!(
            total.finished >= seeds.len() / 5,
            "{protocol}: only {} restarted nodes finished, {} came back too late",
            total.finished,
            total.too_late
        );
    }
}

#[test]
fn mob_survivors_complete_whatever_receivers_fail() {
    chaos(MulticastProtocol::Mob);
}

#[test]
fn bittorrent_survivors_complete_whatever_receivers_fail() {
    chaos(MulticastProtocol::BitTorrent);
}

#[test]
fn balanced_survivors_complete_whatever_receivers_fail() {
    chaos(MulticastProtocol::Balanced);
}

#[test]
fn magpie_survivors_complete_whatever_receivers_fail() {
    chaos(MulticastProtocol::Magpie);
}
