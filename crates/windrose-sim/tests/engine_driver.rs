//! The engine as a driver of `windrose_proto`'s contract, with scripted machines: timers (set,
//! moved, cancelled), compute time, send completions, messages charged their encoded size, late
//! joins, refused inputs, sends to failed nodes, network changes; and the network's
//! `drop_node`.

use crate::engine_common;

use bytes::Bytes;
use engine_common::{close, one_cluster};
use std::sync::{Arc, Mutex};
use windrose_model::platform::{ClusterSpec, LinkId, Platform};
use windrose_model::NodeId;
use windrose_proto::frame::encoded_len;
use windrose_proto::probe::{Probe, ProbeMsg};
use windrose_proto::tree_broadcast::BroadcastConfig;
use windrose_proto::tree_broadcast::{BroadcastMsg, DataSegment};
use windrose_proto::{
    Command, ComputeTask, Input, Message, Output, Outputs, Protocol, ProtocolError, SendId, Status,
    TaskId, Time, TimerId, TransferId,
};
use windrose_sim::engine::{broadcast, ComputeModel, SimConfig, SimError, Simulation};
use windrose_sim::metrics::NodeOutcome;
use windrose_sim::network::{Change, Network, SharingPolicy};

fn n(i: u32) -> NodeId {
    NodeId(i)
}

/// What a scripted machine saw: `(node, now, input)`.
type Seen = Arc<Mutex<Vec<(NodeId, Time, Input)>>>;

type Script =
    Box<dyn FnMut(Time, &Input, &mut Outputs) -> Result<(), ProtocolError> + Send + 'static>;

/// A machine that records its inputs and answers with a script.
struct Scripted {
    me: NodeId,
    script: Script,
    seen: Seen,
    status: Status,
}

impl Scripted {
    fn new(
        me: NodeId,
        seen: &Seen,
        script: impl FnMut(Time, &Input, &mut Outputs) -> Result<(), ProtocolError> + Send + 'static,
    ) -> Scripted {
        Scripted {
            me,
            script: Box::new(script),
            seen: seen.clone(),
            status: Status::Running,
        }
    }

    /// A machine that only records.
    fn quiet(me: NodeId, seen: &Seen) -> Scripted {
        Scripted::new(me, seen, |_, _, _| Ok(()))
    }
}

impl Protocol for Scripted {
    fn node(&self) -> NodeId {
        self.me
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        let before = out.len();
        (self.script)(now, &input, out)?;
        self.seen.lock().unwrap().push((self.me, now, input));
        if out.as_slice()[before..].contains(&Output::Finished) {
            self.status = Status::Finished;
        }
        Ok(())
    }

    fn status(&self) -> Status {
        self.status
    }
}

fn seen() -> Seen {
    Arc::new(Mutex::new(Vec::new()))
}

fn inputs_of(seen: &Seen, node: NodeId) -> Vec<(Time, Input)> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(v, _, _)| *v == node)
        .map(|(_, t, i)| (*t, i.clone()))
        .collect()
}

fn ping(nonce: u64) -> Message {
    Message::Probe(ProbeMsg::Ping(Probe {
        nonce,
        sent_at: Time::ZERO,
    }))
}

fn data(len: usize) -> Message {
    Message::Broadcast(BroadcastMsg::Data(DataSegment {
        transfer: TransferId(1),
        offset: 0,
        total_len: len as u64,
        payload: Bytes::from(vec![1u8; len]),
    }))
}

#[test]
fn timers_fire_when_set_and_can_be_moved_or_cancelled() {
    let s = seen();
    let mut sim = Simulation::new(one_cluster(1, 1e6, 0.0), SimConfig::default());
    sim.add_node(Scripted::new(n(0), &s, |now, input, out| {
        match input {
            Input::Start => {
                out.push(Output::SetTimer {
                    timer: TimerId(1),
                    at: Time::from_millis(10),
                });
                out.push(Output::SetTimer {
                    timer: TimerId(2),
                    at: Time::from_millis(5),
                });
                out.push(Output::SetTimer {
                    timer: TimerId(3),
                    at: Time::from_millis(7),
                });
                out.push(Output::CancelTimer(TimerId(3)));
            }
            Input::Timer(TimerId(2)) => {
                assert_eq!(now, Time::from_millis(5));
                // Move timer 1 later, and set timer 2 again in the past: it fires now.
                out.push(Output::SetTimer {
                    timer: TimerId(1),
                    at: Time::from_millis(20),
                });
                out.push(Output::SetTimer {
                    timer: TimerId(4),
                    at: Time::from_millis(1),
                });
            }
            _ => {}
        }
        Ok(())
    }))
    .unwrap();
    let m = sim.run().unwrap();
    let got: Vec<(Time, Input)> = inputs_of(&s, n(0));
    assert_eq!(
        got,
        vec![
            (Time::ZERO, Input::Start),
            (Time::from_millis(5), Input::Timer(TimerId(2))),
            (Time::from_millis(5), Input::Timer(TimerId(4))),
            (Time::from_millis(20), Input::Timer(TimerId(1))),
        ]
    );
    assert!(close(m.end_time_s, 0.02, 1e-12));
    assert_eq!(m.node(n(0)).unwrap().outcome, NodeOutcome::Running);
}

#[test]
fn compute_tasks_run_one_after_the_other_at_the_node_speed() {
    let s = seen();
    let mut sim = Simulation::new(one_cluster(1, 1e6, 0.0), SimConfig::default());
    sim.add_node(Scripted::new(n(0), &s, |_, input, out| {
        if let Input::Start = input {
            for (task, len) in [(7u32, 500u64), (8, 1000)] {
                out.push(Output::Compute(ComputeTask {
                    task: TaskId(task),
                    offset: 0,
                    len,
                    data: Vec::new(),
                    work: None,
                }));
            }
        }
        if let Input::Command(Command::ComputeDone { task: TaskId(8) }) = input {
            out.push(Output::Finished);
        }
        Ok(())
    }))
    .unwrap();
    sim.set_compute(n(0), ComputeModel::BytesPerSecond(1000.0))
        .unwrap();
    let m = sim.run().unwrap();
    let got = inputs_of(&s, n(0));
    assert_eq!(
        got[1..],
        [
            (
                Time::from_millis(500),
                Input::Command(Command::ComputeDone { task: TaskId(7) })
            ),
            (
                Time::from_millis(1500),
                Input::Command(Command::ComputeDone { task: TaskId(8) })
            ),
        ]
    );
    let nm = m.node(n(0)).unwrap();
    assert_eq!((nm.compute_tasks, nm.compute_bytes), (2, 1500));
    assert_eq!(nm.compute_done_at_s, Some(1.5));
    assert_eq!(nm.finished_at_s, Some(1.5));
    assert_eq!(
        ComputeModel::SecondsPerByte(0.5).duration_s(4),
        2.0,
        "seconds per byte"
    );
    assert!(sim
        .set_compute(n(0), ComputeModel::BytesPerSecond(0.0))
        .is_err());
    assert!(sim
        .set_compute(n(0), ComputeModel::SecondsPerByte(f64::NAN))
        .is_err());
}

#[test]
fn messages_are_charged_their_encoded_size_and_send_completes_with_the_last_byte() {
    let s = seen();
    // 1000 B/s node links, 10 ms between nodes.
    let mut sim = Simulation::new(one_cluster(2, 1000.0, 0.01), SimConfig::default());
    let msg = data(472); // 472 + 28 = 500 wire bytes
    assert_eq!(encoded_len(&msg), 500);
    let m2 = msg.clone();
    sim.add_node(Scripted::new(n(0), &s, move |_, input, out| {
        if let Input::Start = input {
            out.send_notify(n(1), m2.clone(), SendId(42));
            out.send(n(1), ping(1)); // 24 bytes behind it on the same connection
        }
        Ok(())
    }))
    .unwrap();
    sim.add_node(Scripted::quiet(n(1), &s)).unwrap();
    let m = sim.run().unwrap();
    let at0 = inputs_of(&s, n(0));
    let at1 = inputs_of(&s, n(1));
    // Arrival at 0.01 + 500/1000; the ping streams right behind: + 24/1000.
    assert_eq!(
        at1,
        vec![
            (Time::ZERO, Input::Start),
            (
                Time::from_millis(510),
                Input::Message {
                    from: n(0),
                    message: msg
                }
            ),
            (
                Time::from_millis(534),
                Input::Message {
                    from: n(0),
                    message: ping(1)
                }
            ),
        ]
    );
    assert_eq!(
        at0[1],
        (
            Time::from_millis(510),
            Input::SendComplete {
                to: n(1),
                id: SendId(42)
            }
        )
    );
    assert_eq!(at0.len(), 2);
    assert_eq!(m.totals.wire_bytes_sent, 524);
    assert_eq!(m.node(n(1)).unwrap().wire_bytes_received, 524);
    assert_eq!(m.node(n(0)).unwrap().messages_sent, 2);
    assert!(close(m.link_bytes(LinkId::NodeDown(n(1))), 524.0, 1e-12));
}

#[test]
fn a_late_joiner_gets_start_first_then_what_arrived_before() {
    let s = seen();
    let mut sim = Simulation::new(one_cluster(2, 1e6, 0.001), SimConfig::default());
    sim.add_node(Scripted::new(n(0), &s, |_, input, out| {
        if let Input::Start = input {
            out.send(n(1), ping(5));
        }
        Ok(())
    }))
    .unwrap();
    sim.add_node_at(Scripted::quiet(n(1), &s), 2.0).unwrap();
    let m = sim.run().unwrap();
    assert_eq!(
        inputs_of(&s, n(1)),
        vec![
            (Time::from_secs_f64(2.0), Input::Start),
            (
                Time::from_secs_f64(2.0),
                Input::Message {
                    from: n(0),
                    message: ping(5)
                }
            ),
        ]
    );
    assert_eq!(m.node(n(1)).unwrap().started_at_s, Some(2.0));
    // Setup errors.
    assert!(matches!(
        sim.add_node(Scripted::quiet(n(1), &s)),
        Err(SimError::DuplicateNode { .. })
    ));
    assert!(matches!(
        sim.add_node(Scripted::quiet(n(9), &s)),
        Err(SimError::UnknownNode { node_count: 2, .. })
    ));
    assert!(matches!(
        sim.fail_node_at(n(0), 1.0),
        Err(SimError::BadTime { now, .. }) if now == 2.0
    ));
    assert!(sim
        .add_node_at(Scripted::quiet(n(0), &s), f64::NAN)
        .is_err());
}

#[test]
fn refused_inputs_are_recorded_or_fatal_in_strict_mode() {
    for strict in [false, true] {
        let s = seen();
        let config = SimConfig {
            strict,
            ..SimConfig::default()
        };
        let mut sim = Simulation::new(one_cluster(2, 1e6, 0.0), config);
        sim.add_node(Scripted::new(n(0), &s, |_, input, out| {
            if let Input::Start = input {
                out.send(n(1), ping(1));
                out.send(n(0), ping(2)); // to itself: impossible
            }
            Ok(())
        }))
        .unwrap();
        sim.add_node(Scripted::new(n(1), &s, |_, input, _| match input {
            Input::Message { from, message } => Err(ProtocolError::UnexpectedMessage {
                from: *from,
                kind: message.kind(),
                why: "scripted refusal",
            }),
            _ => Ok(()),
        }))
        .unwrap();
        let r = sim.run();
        if strict {
            let e = r.unwrap_err();
            assert!(
                matches!(&e, SimError::Protocol { node, error, .. } if *node == n(0) && error.contains("itself")),
                "{e}"
            );
        } else {
            let m = r.unwrap();
            assert_eq!(m.errors.len(), 2);
            assert_eq!(m.errors[0].node, n(0));
            assert!(m.errors[0].error.contains("to itself"));
            assert_eq!((m.errors[1].node, m.errors[1].peer), (n(1), Some(n(0))));
            assert!(m.errors[1].error.contains("scripted refusal"));
            assert_eq!(m.errors[1].at_s, 24.0 / 1e6);
        }
    }
}

#[test]
fn sends_to_a_failed_node_are_dropped_and_in_flight_ones_too() {
    let s = seen();
    let mut sim = Simulation::new(one_cluster(3, 1000.0, 0.0), SimConfig::default());
    sim.add_node(Scripted::new(n(0), &s, |now, input, out| {
        match input {
            Input::Start => {
                out.send(n(1), data(972)); // 1000 wire bytes: 1 s
                out.send(n(2), data(972));
                out.push(Output::SetTimer {
                    timer: TimerId(0),
                    at: Time::from_secs_f64(3.0),
                });
            }
            Input::Timer(_) => {
                assert_eq!(now, Time::from_secs_f64(3.0));
                out.send(n(1), ping(9));
                out.send(n(2), ping(9));
            }
            _ => {}
        }
        Ok(())
    }))
    .unwrap();
    sim.add_node(Scripted::quiet(n(1), &s)).unwrap();
    sim.add_node(Scripted::quiet(n(2), &s)).unwrap();
    // Node 1 fails half way through its message.
    sim.fail_node_at(n(1), 0.5).unwrap();
    let m = sim.run().unwrap();
    assert_eq!(inputs_of(&s, n(1)), vec![(Time::ZERO, Input::Start)]);
    // Node 2 heard of the failure at 0.5 s, got its message at 1.25 s (the uplink of 0 was
    // shared until 0.5 s: 250 bytes each at 500 B/s, then node 2 alone: 750 bytes at
    // 1000 B/s), then the ping at 3 + 0.024 s.
    let at2 = inputs_of(&s, n(2));
    assert_eq!(at2[1], (Time::from_millis(500), Input::PeerFailed(n(1))));
    assert_eq!(at2[2].0, Time::from_millis(1250));
    assert_eq!(at2[3].0, Time::from_millis(3024));
    assert_eq!(
        inputs_of(&s, n(0))[1],
        (Time::from_millis(500), Input::PeerFailed(n(1)))
    );
    assert_eq!(m.totals.messages_dropped, 2);
    assert_eq!(m.totals.messages_sent, 4);
    assert_eq!(m.totals.messages_delivered, 2);
    // The half-moved message counts on its links.
    assert!(close(m.link_bytes(LinkId::NodeDown(n(1))), 250.0, 1e-12));
    assert_eq!(m.node(n(1)).unwrap().outcome, NodeOutcome::Failed);
    let stats = sim.network().connection_stats(n(0), n(1)).unwrap();
    assert_eq!((stats.messages_dropped, stats.messages_delivered), (1, 0));
}

#[test]
fn a_network_change_mid_transfer_changes_the_arrival_time() {
    // One 1000-wire-byte message over 1000 B/s; at 0.5 s the uplink drops to 250 B/s: the
    // remaining 500 bytes take 2 s.
    let mut sim = broadcast(
        one_cluster(2, 1000.0, 0.0),
        &engine_common::chain(2),
        972u64,
        BroadcastConfig::new(TransferId(1), 972),
        SharingPolicy::MaxMin,
    )
    .unwrap();
    sim.schedule_change(
        0.5,
        Change::Capacity {
            link: LinkId::NodeUp(n(0)),
            bytes_s: 250.0,
        },
    )
    .unwrap();
    let m = sim.run().unwrap();
    assert!(close(
        m.node(n(1)).unwrap().finished_at_s.unwrap(),
        2.5,
        1e-12
    ));
    assert_eq!(m.links[0].capacity_bytes_s, 250.0);
}

#[test]
fn machines_see_the_engine_clock_in_nanoseconds() {
    let s = seen();
    // 24-byte ping over 16 000 B/s and 0.1 ms: arrives at 0.0016 s.
    let mut sim = Simulation::new(one_cluster(2, 16_000.0, 1e-4), SimConfig::default());
    sim.add_node(Scripted::new(n(0), &s, |_, input, out| {
        if let Input::Start = input {
            out.send(n(1), ping(1));
        }
        Ok(())
    }))
    .unwrap();
    sim.add_node(Scripted::quiet(n(1), &s)).unwrap();
    sim.run().unwrap();
    assert_eq!(inputs_of(&s, n(1))[1].0, Time::from_micros(1600));
    assert_eq!(encoded_len(&ping(1)), ProbeMsg::PING.frame_overhead());
}

// ---------------------------------------------------------------------------------------------
// Network::drop_node

#[test]
fn drop_node_discards_queued_messages_and_reshares() {
    let p = Platform::builder()
        .cluster(ClusterSpec::uniform(3, 100.0, 1e6, 0.0))
        .build()
        .unwrap();
    let mut net = Network::new(p, SharingPolicy::MaxMin);
    // 0 sends 100 bytes to 1 and to 2, plus a second message to 1: they share 0's uplink.
    net.send(0.0, n(0), n(1), 100, 10).unwrap();
    let b = net.send(0.0, n(0), n(2), 100, 20).unwrap();
    net.send(0.0, n(0), n(1), 50, 11).unwrap();
    assert!(net.advance_to(0.5).is_empty());
    // At 0.5 s each has moved 25 bytes. Node 1 fails: both of its messages go.
    let dropped = net.drop_node(0.5, n(1)).unwrap();
    assert_eq!(
        dropped.iter().map(|d| (d.tag, d.bytes)).collect::<Vec<_>>(),
        vec![(10, 100), (11, 50)]
    );
    assert_eq!(net.rate_bytes_s(n(0), n(2)), 100.0);
    let done = net.run_until_idle();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].id, b);
    assert!(close(done[0].at, 0.5 + 75.0 / 100.0, 1e-12));
    let up = net.link_stats(LinkId::NodeUp(n(0)));
    assert!(close(up.bytes, 125.0, 1e-12));
    let s = net.connection_stats(n(0), n(1)).unwrap();
    assert_eq!((s.messages_sent, s.messages_dropped), (2, 2));
    // Errors: time in the past, unknown node; a node without connections drops nothing.
    assert!(net.drop_node(0.1, n(2)).is_err());
    assert!(net.drop_node(2.0, n(7)).is_err());
    assert!(net.drop_node(2.0, n(2)).unwrap().is_empty());
    // The connection is usable again afterwards.
    net.send(3.0, n(0), n(1), 100, 12).unwrap();
    let again = net.run_until_idle();
    assert!(close(again[0].at, 4.0, 1e-12));
}

#[test]
fn drop_node_while_a_message_waits_for_its_latency() {
    let p = Platform::builder()
        .cluster(ClusterSpec::uniform(2, 100.0, 1e6, 1.0))
        .build()
        .unwrap();
    let mut net = Network::new(p, SharingPolicy::RttWeighted);
    net.send(0.0, n(0), n(1), 100, 1).unwrap();
    let dropped = net.drop_node(0.5, n(0)).unwrap();
    assert_eq!(dropped.len(), 1);
    assert!(net.run_until_idle().is_empty());
    assert_eq!(net.link_stats(LinkId::NodeUp(n(0))).bytes, 0.0);
}

#[test]
fn changes_scheduled_after_the_protocol_ended_do_not_prolong_the_run() {
    let mut sim = broadcast(
        one_cluster(2, 1000.0, 0.0),
        &engine_common::chain(2),
        972u64,
        BroadcastConfig::new(TransferId(1), 972),
        SharingPolicy::MaxMin,
    )
    .unwrap();
    for k in 1..=100 {
        sim.schedule_change(
            5.0 * k as f64,
            Change::Capacity {
                link: LinkId::NodeUp(n(0)),
                bytes_s: 10.0 * k as f64,
            },
        )
        .unwrap();
    }
    let m = sim.run().unwrap();
    assert_eq!(m.end_time_s, 1.0);
    assert_eq!(sim.now(), 1.0);
    assert!(sim.all_ended());
    assert_eq!(sim.ended_count(), 2);
    // The first change (at 5 s) was never applied.
    assert_eq!(
        sim.network()
            .platform()
            .capacity_bytes_s(LinkId::NodeUp(n(0))),
        1000.0
    );
}

#[test]
fn anything_can_be_scheduled_at_now_between_run_until_calls() {
    let mut sim = broadcast(
        one_cluster(4, 1e5, 3e-3),
        &engine_common::chain(4),
        200_000u64,
        BroadcastConfig::new(TransferId(1), 7_000),
        SharingPolicy::RttWeighted,
    )
    .unwrap();
    let mut t = 0.0;
    while sim.run_until(t).unwrap() == windrose_sim::engine::RunState::Paused {
        // Re-setting a capacity to its value changes nothing, but must be accepted at `now`.
        sim.schedule_change(
            sim.now(),
            Change::Capacity {
                link: LinkId::NodeUp(n(1)),
                bytes_s: 1e5,
            },
        )
        .unwrap();
        t += 0.0123;
    }
    let m = sim.metrics();
    assert!(m.all_finished());
    let hop = 3e-3;
    let t_seg = BroadcastConfig::new(TransferId(1), 7_000).wire_bytes_per_edge(7_000) as f64 / 1e5;
    // 200 000 = 28 segments of 7000 + one of 4000: the pipelined closed form up to the last one.
    let last = (4000.0 + 28.0) / 1e5;
    let want = 3.0 * hop + (3.0 + 28.0 - 1.0) * t_seg + last;
    assert!(
        close(m.makespan_s.unwrap(), want, 1e-9),
        "{} vs {want}",
        m.makespan_s.unwrap()
    );
}

/// The platform's LogP send cost, by hand: node 0 sends a ping to each of 1, 2, 3 at time 0
/// over 10 ms links (capacity so high the 24 bytes take picoseconds). With o = 2 ms and
/// g = 5 ms the sends start at 0, 5, 10 ms and leave at 2, 7, 12: arrivals at 12, 17, 22 ms.
/// With o = 4 ms and g = 1 ms each send waits for the previous one to leave: starts 0, 4, 8,
/// arrivals 14, 18, 22 ms. A receiver that fails before its message leaves loses it (counted
/// as dropped); a sender without a cost sends at once.
#[test]
fn the_send_cost_delays_each_message_at_its_sender() {
    use windrose_model::platform::SendCost;
    let run = |o: f64, g: f64, fail_3_at: Option<f64>| {
        let s = seen();
        let mut p = one_cluster(4, 1e12, 0.01);
        p.set_send_cost(
            n(0),
            SendCost {
                overhead_s: o,
                gap_s: g,
            },
        )
        .unwrap();
        let mut sim = Simulation::new(p, SimConfig::default());
        sim.add_node(Scripted::new(n(0), &s, |_, input, out| {
            if let Input::Start = input {
                for k in 1..4 {
                    out.send(n(k), ping(u64::from(k)));
                }
            }
            Ok(())
        }))
        .unwrap();
        for k in 1..4 {
            // Node 1 answers at once: its own sends cost nothing.
            sim.add_node(Scripted::new(n(k), &s, move |_, input, out| {
                if k == 1 && matches!(input, Input::Message { .. }) {
                    out.send(n(0), ping(9));
                }
                Ok(())
            }))
            .unwrap();
        }
        // A negative time fails the sender at its absolute value instead.
        match fail_3_at {
            Some(t) if t < 0.0 => sim.fail_node_at(n(0), -t).unwrap(),
            Some(t) => sim.fail_node_at(n(3), t).unwrap(),
            None => {}
        }
        let m = sim.run().unwrap();
        let arrival = |k: u32| {
            inputs_of(&s, n(k))
                .iter()
                .find(|(_, i)| matches!(i, Input::Message { .. }))
                .map(|(t, _)| t.as_secs_f64())
        };
        (
            [arrival(1), arrival(2), arrival(3), arrival(0)],
            m.totals.messages_dropped,
        )
    };
    let near = |got: Option<f64>, ms: f64| {
        let got = got.expect("arrived");
        assert!(
            (got - ms / 1000.0).abs() < 1e-8,
            "{got} s, expected {ms} ms"
        );
    };
    let (a, dropped) = run(0.002, 0.005, None);
    for (got, ms) in a.iter().zip([12.0, 17.0, 22.0, 22.0]) {
        near(*got, ms);
    }
    assert_eq!(dropped, 0);
    let (a, _) = run(0.004, 0.001, None);
    for (got, ms) in a.iter().zip([14.0, 18.0, 22.0, 24.0]) {
        near(*got, ms);
    }
    let (a, dropped) = run(0.002, 0.005, Some(0.006));
    near(a[0], 12.0);
    near(a[1], 17.0);
    assert_eq!(a[2], None);
    assert_eq!(dropped, 1);
    // The sender fails at 3 ms: its first ping is in the network, the two others still pay
    // their cost; all three are lost.
    let (a, dropped) = run(0.002, 0.005, Some(-0.003));
    assert_eq!(a, [None; 4]);
    assert_eq!(dropped, 3);
    let (a, _) = run(0.0, 0.0, None);
    for (got, ms) in a.iter().zip([10.0, 10.0, 10.0, 20.0]) {
        near(*got, ms);
    }
}
