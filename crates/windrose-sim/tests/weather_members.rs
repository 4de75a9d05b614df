//! Issue 16 in the simulator: a member leaving and coming back between the broadcasts of an
//! adapting group. The root's adapted tree takes the member out and back in without a rebuild
//! (the planner parks a failed member at a leaf and adapts the kept tree), every live member
//! gets every broadcast, and the member that came back gets the ones after its return.

use crate::support::three_sites;

use std::time::Duration;
use three_sites::platform;
use windrose_model::NodeId;
use windrose_proto::host::{Host, HostConfig};
use windrose_proto::planner::TreePolicy;
use windrose_proto::{Report, TransferId};
use windrose_sim::engine::{SimConfig, Simulation};
use windrose_sim::group::{group, leave_input, members_of};
use windrose_trees::adaptive::Strategy;

const N: u32 = 9;
const BYTES: usize = 1 << 20;
/// A broadcast every PERIOD seconds from t = 1 s.
const PERIOD: f64 = 5.0;
const COUNT: usize = 6;
/// Node LEAVER fails after the second broadcast and restarts (a fresh host) after the fourth.
const LEAVER: NodeId = NodeId(4);
const FAIL_AT: f64 = 1.0 + PERIOD * 1.5;
const BACK_AT: f64 = 1.0 + PERIOD * 3.5;

fn tune(c: &mut HostConfig) {
    c.heartbeat = Some(Duration::from_millis(200));
    c.silent_after = Duration::from_secs(1);
}

fn reassembled(sim: &Simulation, node: NodeId, t: TransferId) -> Vec<u8> {
    let mut out = Vec::new();
    for (offset, d) in sim.delivered_of(node, t) {
        assert_eq!(offset as usize, out.len(), "{node} got data out of order");
        out.extend_from_slice(&d);
    }
    out
}

#[test]
fn a_member_leaving_and_coming_back_between_broadcasts_is_adapted_in_and_out_without_a_rebuild() {
    let config = SimConfig {
        strict: true,
        record_deliveries: true,
        ..SimConfig::default()
    };
    let mut sim = group(platform(), config, 11, tune).unwrap();
    let policy = TreePolicy::Adapt {
        strategy: Strategy::Position,
        threshold: 0.2,
    };
    let data = three_sites::pattern(BYTES);
    three_sites::start_broadcasts(&mut sim, policy, &data, COUNT, PERIOD);
    sim.fail_node_at(LEAVER, FAIL_AT).unwrap();
    let mut c = HostConfig::new(LEAVER, members_of(&platform()), 11);
    tune(&mut c);
    sim.restart_node_at(Box::new(Host::new(c).unwrap()), BACK_AT)
        .unwrap();
    let end = 1.0 + PERIOD * COUNT as f64 + 10.0;
    for n in 0..N {
        sim.input_at(NodeId(n), end, leave_input()).unwrap();
    }
    let m = sim.run().unwrap();

    let root: Vec<(f64, Report)> = m.nodes[0]
        .reports
        .iter()
        .map(|r| (r.at_s, r.report))
        .collect();
    let complete: Vec<(f64, TransferId, u32, u32)> = root
        .iter()
        .filter_map(|&(at, r)| match r {
            Report::CollectiveComplete {
                transfer,
                finished,
                failed,
            } => Some((at, transfer, finished, failed)),
            _ => None,
        })
        .collect();
    assert_eq!(complete.len(), COUNT, "{root:?}");
    let plans: Vec<bool> = root
        .iter()
        .filter_map(|&(_, r)| match r {
            Report::TreePlanned { built, .. } => Some(built),
            _ => None,
        })
        .collect();
    assert_eq!(plans.len(), COUNT, "{root:?}");
    // Built once, for the first broadcast; the leave and the return are adapted in.
    assert!(plans[0] && plans[1..].iter().all(|b| !b), "{plans:?}");
    for (k, &(at, t, finished, failed)) in complete.iter().enumerate() {
        let out = at > FAIL_AT && at < BACK_AT;
        let want = if out { N - 1 } else { N };
        assert_eq!(
            (finished, failed),
            (want, 0),
            "broadcast {k} ({t}) at {at} s"
        );
        for n in 1..N {
            let node = NodeId(n);
            // The leaver's record starts again with its new life: check it after its return.
            if node == LEAVER && at < BACK_AT {
                continue;
            }
            let got = reassembled(&sim, node, t);
            assert!(
                got == data[..],
                "broadcast {k} ({t}) at {node}: {} of {} bytes, or other bytes",
                got.len(),
                data.len()
            );
        }
    }
    // Both kinds of broadcast happened: with the member out, and after its return.
    assert!(complete
        .iter()
        .any(|&(at, _, _, _)| at > FAIL_AT && at < BACK_AT));
    assert!(complete.iter().any(|&(at, _, _, _)| at > BACK_AT));
}
