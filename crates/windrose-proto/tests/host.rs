//! The Host by hand: the session's refusal and cancel path, machines' ids renamed apart,
//! bad session frames and strangers refused, late frames of an ended collective dropped.

use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use windrose_model::{ClusterId, NodeId};
use windrose_proto::collective::{CollectiveSpec, TreeSpec};
use windrose_proto::collective::{ManifestSpec, MulticastParams};
use windrose_proto::frame::{self, Decoder, Message, TransferId};
use windrose_proto::host::SessionFrame;
use windrose_proto::host::{App, AppRequest, Host, HostConfig, PieceShelf, SessionMsg, Shelved};
use windrose_proto::mob::MobConfig;
use windrose_proto::multicast::{MulticastProtocol, MulticastSpec};
use windrose_proto::pieces::{Manifest, PieceKeeper, PieceMsg};
use windrose_proto::tree_broadcast::{BroadcastMsg, DataSegment};
use windrose_proto::{
    Command, ComputedShare, Input, Output, Outputs, Protocol, Report, Time, TimerId,
};
use windrose_trees::static_trees::binomial_all;

use crate::support::host_outputs;
use host_outputs::{completion, delivered};

fn members(n: u32) -> Arc<[(NodeId, ClusterId)]> {
    (0..n).map(|i| (NodeId(i), ClusterId(0))).collect()
}

fn host(me: u32, group: u32) -> Host {
    let mut c = HostConfig::new(NodeId(me), members(group), 1);
    c.heartbeat = None;
    Host::new(c).unwrap()
}

fn broadcast(n: u32) -> CollectiveSpec {
    CollectiveSpec::Broadcast {
        tree: TreeSpec::of(&binomial_all(n as usize, NodeId(0)).unwrap()),
        segment_bytes: 4,
        max_frame_payload: 4,
    }
}

fn start(spec: CollectiveSpec, data: &'static [u8]) -> Input {
    Input::App(App::new(AppRequest::StartCollective {
        spec,
        data: Bytes::from_static(data),
        transfer: None,
    }))
}

/// Delivers every send at once through the real wire format until nothing moves; returns
/// each node's non-send outputs in order. Timers are not fired.
fn pump(hosts: &mut [Host], queue: VecDeque<(NodeId, Input)>) -> Vec<Vec<Output>> {
    pump_with(hosts, queue, |_, _| false).0
}

/// A session message sent: `(from, to, message)`.
type Sent = (NodeId, NodeId, SessionMsg);

/// Inputs waiting for their node.
type Queue = VecDeque<(NodeId, Input)>;

/// [`pump`], holding back each frame `defer(to, message)` picks until nothing else moves
/// (then in order), and logging every session message sent: `(from, to, message)`.
fn pump_with(
    hosts: &mut [Host],
    queue: VecDeque<(NodeId, Input)>,
    defer: impl Fn(NodeId, &Message) -> bool,
) -> (Vec<Vec<Output>>, Vec<Sent>) {
    let (seen, sent, _) = pump_routed(hosts, queue, |to, m| {
        if defer(to, m) {
            Route::Defer
        } else {
            Route::Deliver
        }
    });
    (seen, sent)
}

/// What becomes of a frame in [`pump_routed`].
#[derive(Copy, Clone, PartialEq, Eq)]
enum Route {
    Deliver,
    /// Held back until nothing else moves.
    Defer,
    /// Lost.
    Drop,
    /// Kept aside and returned (a stopped process: delivered when it is continued).
    Hold,
}

/// [`pump_with`] where `route(to, message)` may also lose a frame or keep it aside; returns
/// the frames kept aside too.
fn pump_routed(
    hosts: &mut [Host],
    mut queue: VecDeque<(NodeId, Input)>,
    route: impl Fn(NodeId, &Message) -> Route,
) -> (Vec<Vec<Output>>, Vec<Sent>, Queue) {
    let mut aside = VecDeque::new();
    let mut seen = vec![Vec::new(); hosts.len()];
    let mut sessions = Vec::new();
    let mut deferred = VecDeque::new();
    let mut out = Outputs::new();
    let mut step = 0u64;
    loop {
        let Some((node, input)) = queue.pop_front().or_else(|| deferred.pop_front()) else {
            break;
        };
        step += 1;
        assert!(step < 100_000, "the run does not end");
        if node.index() >= hosts.len() {
            continue; // a member only some hosts believe in
        }
        hosts[node.index()]
            .handle(Time::from_nanos(step), input, &mut out)
            .unwrap_or_else(|e| panic!("node {node}: {e}"));
        for o in out.drain() {
            match o {
                Output::Send(t) => {
                    // Transmitted at once.
                    if let Some(id) = t.notify {
                        queue.push_back((node, Input::SendComplete { to: t.to, id }));
                    }
                    let mut d = Decoder::new();
                    d.push(&frame::encode(&t.message).unwrap());
                    let message = d.next_message().unwrap().unwrap();
                    if let Message::Session(f) = &message {
                        sessions.push((node, t.to, SessionMsg::from_frame(f).unwrap()));
                    }
                    let fate = route(t.to, &message);
                    let item = (
                        t.to,
                        Input::Message {
                            from: node,
                            message,
                        },
                    );
                    match fate {
                        Route::Deliver => queue.push_back(item),
                        Route::Defer => deferred.push_back(item),
                        Route::Drop => {}
                        Route::Hold => aside.push_back(item),
                    }
                }
                other => {
                    // The application computes at once.
                    if let Output::Compute(t) = &other {
                        queue.push_back((
                            node,
                            Input::Command(Command::ComputeDone { task: t.task }),
                        ));
                    }
                    seen[node.index()].push(other)
                }
            }
        }
    }
    (seen, sessions, aside)
}

fn started_all(hosts: &[Host]) -> VecDeque<(NodeId, Input)> {
    hosts.iter().map(|h| (h.node(), Input::Start)).collect()
}

#[test]
fn a_member_that_refuses_cancels_the_collective_everywhere() {
    // Node 1 believes the group has four members, so the three-node tree does not span it.
    let mut hosts = vec![host(0, 3), host(1, 4), host(2, 3)];
    let mut q = started_all(&hosts);
    q.push_back((NodeId(0), start(broadcast(3), b"abcdefgh")));
    let seen = pump(&mut hosts, q);
    let refused = |v: &Vec<Output>| {
        v.iter()
            .any(|o| matches!(o, Output::Report(Report::CollectiveRefused { .. })))
    };
    assert!(refused(&seen[0]) && refused(&seen[1]) && refused(&seen[2]));
    assert!(seen[0].iter().any(|o| matches!(
        o,
        Output::Report(Report::CollectiveComplete {
            finished: 0,
            failed: 1,
            ..
        })
    )));
    assert!(seen
        .iter()
        .flatten()
        .all(|o| !matches!(o, Output::Deliver { .. })));
    assert!(hosts.iter().all(|h| h.running().next().is_none()));
}

#[test]
fn a_spec_the_initiator_cannot_build_is_refused_with_its_reason() {
    let mut hosts = vec![host(0, 3), host(1, 3), host(2, 3)];
    let mut q = started_all(&hosts);
    // A tree of four nodes in a group of three.
    q.push_back((NodeId(0), start(broadcast(4), b"abcdefgh")));
    let seen = pump(&mut hosts, q);
    assert!(seen[0]
        .iter()
        .any(|o| matches!(o, Output::Report(Report::CollectiveRefused { .. }))));
    let f = hosts[0].take_failures();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].member, NodeId(0));
    assert!(!f[0].why.is_empty());
    // Nobody else heard of it.
    assert!(seen[1..]
        .iter()
        .flatten()
        .all(|o| !matches!(o, Output::Report(_))));
    assert!(hosts[1].take_failures().is_empty());
}

#[test]
fn a_member_given_up_before_it_ever_joined_is_alive_once_it_joins() {
    // Host 1 loses "member 0" before member 0 runs (a stranger that used its name, a dial
    // that failed); then member 0 starts, joins and starts a broadcast.
    let mut hosts = vec![host(0, 2), host(1, 2)];
    let q = VecDeque::from([
        (NodeId(1), Input::Start),
        (NodeId(1), Input::PeerFailed(NodeId(0))),
        (NodeId(0), Input::Start),
        (NodeId(0), start(broadcast(2), b"abcdefgh")),
    ]);
    let seen = pump(&mut hosts, q);
    assert_eq!(delivered(&seen[1]), b"abcdefgh");
    assert!(seen[0].iter().any(|o| matches!(
        o,
        Output::Report(Report::CollectiveComplete {
            finished: 2,
            failed: 0,
            ..
        })
    )));
    assert!(hosts[1].take_failures().is_empty());
}

#[test]
fn two_collectives_on_one_host_get_distinct_timer_ids_and_their_own_timeouts() {
    let mut hosts = vec![host(0, 2), host(1, 2)];
    // Two broadcasts from node 0; node 1 gets only their announcements and Go, no data, so
    // each of its machines arms its idle timer.
    let mut q = started_all(&hosts);
    q.push_back((NodeId(0), start(broadcast(2), b"first")));
    q.push_back((NodeId(0), start(broadcast(2), b"second")));
    let mut out = Outputs::new();
    let mut timers = Vec::new();
    let mut step = 0u64;
    let mut transfers = Vec::new();
    while let Some((node, input)) = q.pop_front() {
        step += 1;
        hosts[node.index()]
            .handle(Time::from_nanos(step), input, &mut out)
            .unwrap();
        for o in out.drain() {
            match o {
                Output::Send(t) => {
                    // Drop the data: only session frames reach node 1.
                    if matches!(t.message, Message::Session(_)) {
                        q.push_back((
                            t.to,
                            Input::Message {
                                from: node,
                                message: t.message,
                            },
                        ));
                    }
                }
                Output::SetTimer { timer, .. } if node == NodeId(1) => timers.push(timer),
                Output::Report(Report::CollectiveStarted { transfer, .. }) if node == NodeId(1) => {
                    transfers.push(transfer)
                }
                _ => {}
            }
        }
    }
    assert_eq!(transfers.len(), 2);
    timers.sort();
    timers.dedup();
    assert_eq!(
        timers.len(),
        2,
        "the two machines' idle timers share a host id"
    );
    // The first timer aborts exactly one collective.
    let fire = Time::from_secs_f64(1000.0);
    hosts[1]
        .handle(fire, Input::Timer(timers[0]), &mut out)
        .unwrap();
    let ended: Vec<(TransferId, bool)> = out
        .drain()
        .filter_map(|o| match o {
            Output::Report(Report::CollectiveEnded { transfer, finished }) => {
                Some((transfer, finished))
            }
            _ => None,
        })
        .collect();
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert!(!ended[0].1);
    // The second timer ends the other one.
    hosts[1]
        .handle(fire, Input::Timer(timers[1]), &mut out)
        .unwrap();
    let second: Vec<TransferId> = out
        .drain()
        .filter_map(|o| match o {
            Output::Report(Report::CollectiveEnded { transfer, .. }) => Some(transfer),
            _ => None,
        })
        .collect();
    assert_eq!(second.len(), 1);
    assert_ne!(second[0], ended[0].0);
}

#[test]
fn bad_session_frames_and_strangers_are_refused_and_change_nothing() {
    let mut h = host(1, 2);
    let mut out = Outputs::new();
    h.handle(Time::ZERO, Input::Start, &mut out).unwrap();
    out.clear();
    let garbage = Message::Session(SessionFrame {
        body: Bytes::from_static(b"{not json"),
    });
    assert!(h
        .handle(
            Time::ZERO,
            Input::Message {
                from: NodeId(0),
                message: garbage
            },
            &mut out
        )
        .is_err());
    let hb = SessionMsg::Heartbeat.to_message();
    assert!(h
        .handle(
            Time::ZERO,
            Input::Message {
                from: NodeId(7),
                message: hb
            },
            &mut out
        )
        .is_err());
    // An announcement that claims another node's root.
    let spoof = SessionMsg::Announce {
        transfer: TransferId(3),
        root: NodeId(1),
        total_len: 8,
        spec: broadcast(2),
        rejoin: false,
        excluded: Vec::new(),
        eager: false,
        mac: None,
    }
    .to_message();
    assert!(h
        .handle(
            Time::ZERO,
            Input::Message {
                from: NodeId(0),
                message: spoof
            },
            &mut out
        )
        .is_err());
    assert!(out.is_empty());
    assert_eq!(h.running().count(), 0);
}

#[test]
fn frames_of_an_ended_collective_are_dropped_quietly() {
    let mut hosts = vec![host(0, 2), host(1, 2)];
    let mut q = started_all(&hosts);
    q.push_back((NodeId(0), start(broadcast(2), b"late frames")));
    let seen = pump(&mut hosts, q);
    let t = seen[1]
        .iter()
        .find_map(|o| match o {
            Output::Deliver { transfer, .. } => Some(*transfer),
            _ => None,
        })
        .unwrap();
    assert!(seen[0].iter().any(|o| matches!(
        o,
        Output::Report(Report::CollectiveComplete {
            finished: 2,
            failed: 0,
            ..
        })
    )));
    let late = Message::Broadcast(BroadcastMsg::Data(DataSegment {
        transfer: t,
        offset: 0,
        total_len: 11,
        payload: Bytes::from_static(b"late"),
    }));
    let mut out = Outputs::new();
    hosts[1]
        .handle(
            Time::from_secs_f64(1.0),
            Input::Message {
                from: NodeId(0),
                message: late,
            },
            &mut out,
        )
        .unwrap();
    assert!(out.is_empty());
    // And stale timers of it are ignored.
    hosts[1]
        .handle(
            Time::from_secs_f64(2.0),
            Input::Timer(TimerId(40)),
            &mut out,
        )
        .unwrap();
    assert!(out.is_empty());
}

#[test]
fn leaving_waits_for_running_collectives_then_tells_every_member() {
    let mut hosts = vec![host(0, 3), host(1, 3), host(2, 3)];
    let mut q = started_all(&hosts);
    q.push_back((NodeId(0), start(broadcast(3), b"before leaving")));
    q.push_back((NodeId(0), Input::App(App::new(AppRequest::Leave))));
    let seen = pump(&mut hosts, q);
    // Node 0 finished only after its collective completed.
    let complete = seen[0]
        .iter()
        .position(|o| matches!(o, Output::Report(Report::CollectiveComplete { .. })))
        .unwrap();
    let finished = seen[0].iter().position(|o| *o == Output::Finished).unwrap();
    assert!(complete < finished);
    let _ = Duration::ZERO;
}

/// A host without heartbeats that digests what it delivers when `on`.
fn digesting(me: u32, group: u32, on: bool) -> Host {
    let mut c = HostConfig::new(NodeId(me), members(group), 1);
    c.heartbeat = None;
    c.digest_deliveries = on;
    Host::new(c).unwrap()
}

fn member_reports(outputs: &[Output]) -> Vec<(u32, bool, u64, Option<[u8; 32]>)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Report(Report::MemberDone {
                member,
                finished,
                bytes_delivered,
                digest,
                ..
            }) => Some((member.0, *finished, *bytes_delivered, *digest)),
            _ => None,
        })
        .collect()
}

/// With `digest_deliveries`, every member reports the digest of what it delivered (the
/// application's: BLAKE3 by default) and the initiator reports each member's end before the
/// collective's: the root's bytes at every member that digests, nothing from a host that does
/// not; a member lost before it reported counts as not finished, with nothing delivered and
/// no time. Every member that started reports how long its part took on its clock.
#[test]
fn the_initiator_reports_every_members_end_with_the_digest_of_what_it_delivered() {
    let data: &'static [u8] = b"the same bytes at every member of the group";
    let mut hosts: Vec<Host> = (0..4).map(|i| digesting(i, 4, i != 3)).collect();
    let mut queue = started_all(&hosts);
    queue.push_back((NodeId(0), start(broadcast(4), data)));
    let seen = pump(&mut hosts, queue);
    let want = *blake3::hash(data).as_bytes();
    let timed: Vec<bool> = seen[0]
        .iter()
        .filter_map(|o| match o {
            Output::Report(Report::MemberDone { elapsed, .. }) => Some(elapsed.is_some()),
            _ => None,
        })
        .collect();
    assert_eq!(timed, vec![true; 4]);
    let mut got = member_reports(&seen[0]);
    got.sort_by_key(|r| r.0);
    let empty = *blake3::hash(b"").as_bytes();
    let n = data.len() as u64;
    assert_eq!(
        got,
        vec![
            (0, true, 0, Some(empty)),
            (1, true, n, Some(want)),
            (2, true, n, Some(want)),
            (3, true, n, None),
        ]
    );
    let complete = seen[0]
        .iter()
        .position(|o| matches!(o, Output::Report(Report::CollectiveComplete { .. })))
        .unwrap();
    let last_member = seen[0]
        .iter()
        .rposition(|o| matches!(o, Output::Report(Report::MemberDone { .. })))
        .unwrap();
    assert!(last_member < complete);
    for s in &seen[1..] {
        assert!(
            member_reports(s).is_empty(),
            "only the initiator reports members"
        );
    }

    // Node 2 of a three-member group never answers: lost, it counts as not finished.
    let mut hosts: Vec<Host> = (0..2).map(|i| digesting(i, 3, true)).collect();
    let mut queue = started_all(&hosts);
    queue.push_back((NodeId(0), start(broadcast(3), data)));
    let first = pump(&mut hosts, queue);
    assert!(
        member_reports(&first[0]).is_empty(),
        "waits for node 2's Ready"
    );
    let seen = pump(
        &mut hosts,
        VecDeque::from([(NodeId(0), Input::PeerFailed(NodeId(2)))]),
    );
    let mut got = member_reports(&seen[0]);
    got.sort_by_key(|r| r.0);
    assert_eq!(got[2], (2, false, 0, None), "{got:?}");
    assert!(seen[0].iter().any(|o| matches!(
        o,
        Output::Report(Report::MemberDone {
            member: NodeId(2),
            elapsed: None,
            ..
        })
    )));
    assert_eq!((got[0].1, got[1].1), (true, true), "{got:?}");
}

/// A member's report has the same length whatever its timing (its time as 16 hex digits), so
/// the simulator's byte counts of session frames are the runtime's; it reads back as sent.
#[test]
fn a_done_message_has_one_length_whatever_the_timing() {
    use windrose_proto::host::MemberReport;
    let done = |elapsed_ns| SessionMsg::Done {
        transfer: TransferId(7),
        report: MemberReport {
            finished: true,
            error: None,
            bytes_delivered: 5,
            digest: None,
            elapsed_ns,
            resumed_bytes: None,
            share: None,
            phases: Vec::new(),
        },
    };
    let lens: Vec<usize> = [Some(0), Some(123), Some(u64::MAX)]
        .map(|e| frame::encode(&done(e).to_message()).unwrap().len())
        .to_vec();
    assert_eq!(lens, vec![lens[0]; 3]);
    for e in [None, Some(0), Some(987_654_321), Some(u64::MAX)] {
        let Message::Session(f) = done(e).to_message() else {
            unreachable!()
        };
        assert_eq!(SessionMsg::from_frame(&f).unwrap(), done(e));
    }
}

fn eager_host(me: u32, group: u32) -> Host {
    let mut c = HostConfig::new(NodeId(me), members(group), 1);
    c.heartbeat = None;
    c.eager = true;
    Host::new(c).unwrap()
}

#[test]
fn an_eager_collective_needs_no_ready_or_go_and_takes_frames_before_its_announcement() {
    // Binomial tree of 6 from node 0: nodes 3 and 5 get their data from a node other than
    // the root. Every announcement is held back until nothing else moves, so those nodes
    // hear of the transfer from their parent's data first.
    let n = 6;
    let mut hosts: Vec<Host> = (0..n).map(|i| eager_host(i, n)).collect();
    let mut q = started_all(&hosts);
    let data = b"eager sessions start at once";
    q.push_back((NodeId(0), start(broadcast(n), data)));
    let announce_of = |m: &Message| {
        matches!(m, Message::Session(f)
            if matches!(SessionMsg::from_frame(f), Ok(SessionMsg::Announce { .. })))
    };
    let (seen, sessions) = pump_with(&mut hosts, q, |_, m| announce_of(m));
    for (i, s) in seen.iter().enumerate().skip(1) {
        assert_eq!(delivered(s), data.to_vec(), "node {i}");
    }
    let kinds: Vec<&SessionMsg> = sessions.iter().map(|(_, _, m)| m).collect();
    assert!(
        kinds
            .iter()
            .all(|m| !matches!(m, SessionMsg::Ready { .. } | SessionMsg::Go { .. })),
        "{kinds:?}"
    );
    let announces = kinds
        .iter()
        .filter(|m| matches!(m, SessionMsg::Announce { eager: true, .. }))
        .count();
    assert_eq!(announces, n as usize - 1);
    assert!(seen[0].iter().any(|o| matches!(
        o,
        Output::Report(Report::CollectiveComplete {
            finished: 6,
            failed: 0,
            ..
        })
    )));
    assert!(hosts.iter().all(|h| h.running().next().is_none()));
}

#[test]
fn an_eager_member_that_refuses_is_counted_failed_and_the_others_finish() {
    // Node 3 believes the group has five members, so the tree of four does not span it: it
    // refuses, after its parent may already have sent it data (dropped with the refusal).
    let mut hosts = vec![
        eager_host(0, 4),
        eager_host(1, 4),
        eager_host(2, 4),
        eager_host(3, 5),
    ];
    let mut q = started_all(&hosts);
    q.push_back((NodeId(0), start(broadcast(4), b"three of four")));
    let (seen, _) = pump_with(&mut hosts, q, |to, m| {
        to == NodeId(3) && matches!(m, Message::Session(_))
    });
    for (i, s) in seen.iter().enumerate().take(3).skip(1) {
        assert_eq!(delivered(s), b"three of four".to_vec(), "node {i}");
    }
    assert!(delivered(&seen[3]).is_empty());
    assert!(seen[3]
        .iter()
        .any(|o| matches!(o, Output::Report(Report::CollectiveRefused { .. }))));
    assert!(seen[0].iter().any(|o| matches!(
        o,
        Output::Report(Report::CollectiveComplete {
            finished: 3,
            failed: 1,
            ..
        })
    )));
    assert!(hosts.iter().all(|h| h.running().next().is_none()));
}

/// The transfer a host's outputs say it started.
fn started_transfer(seen: &[Output]) -> TransferId {
    seen.iter()
        .find_map(|o| match o {
            Output::Report(Report::CollectiveStarted { transfer, .. }) => Some(*transfer),
            _ => None,
        })
        .expect("a collective started")
}

fn abort(transfer: TransferId, reason: &str) -> Input {
    Input::App(App::new(AppRequest::Abort {
        transfer,
        reason: reason.to_string(),
    }))
}

/// The initiator calls a running broadcast off (its source changed): the member still
/// receiving ends aborted with the initiator's reason, the initiator counts it failed with
/// that reason and completes, and nothing keeps running. A member cannot call it off.
#[test]
fn the_initiator_calls_a_running_collective_off_and_every_member_hears_why() {
    let mut hosts = vec![host(0, 3), host(1, 3), host(2, 3)];
    let mut q = started_all(&hosts);
    let data = b"twelve bytes";
    q.push_back((NodeId(0), start(broadcast(3), data)));
    // Node 2's data is lost: it cannot finish, so the collective stays open.
    let starve = |to: NodeId, m: &Message| {
        if to == NodeId(2) && matches!(m, Message::Broadcast(_)) {
            Route::Drop
        } else {
            Route::Deliver
        }
    };
    let (seen, _, _) = pump_routed(&mut hosts, q, starve);
    let t = started_transfer(&seen[0]);
    assert_eq!(delivered(&seen[1]), data.to_vec());
    assert!(delivered(&seen[2]).is_empty());
    assert_eq!(hosts[0].running().collect::<Vec<_>>(), vec![t]);

    // A member's request to call it off changes nothing.
    let (seen1, _, _) = pump_routed(&mut hosts, [(NodeId(1), abort(t, "no"))].into(), starve);
    assert!(seen1.iter().all(|s| s.is_empty()));
    assert_eq!(hosts[0].running().collect::<Vec<_>>(), vec![t]);

    let why = "the source file changed";
    let (seen, _, _) = pump_routed(&mut hosts, [(NodeId(0), abort(t, why))].into(), starve);
    assert!(seen[2].contains(&Output::Report(Report::CollectiveEnded {
        transfer: t,
        finished: false
    })));
    let f2 = hosts[2].take_failures();
    assert_eq!(f2.len(), 1, "{f2:?}");
    assert_eq!(f2[0].member, NodeId(2));
    assert_eq!(
        f2[0].why,
        format!("node 0 called the collective off: {why}")
    );
    let f0 = hosts[0].take_failures();
    assert!(
        f0.iter()
            .any(|f| f.transfer == t && f.member == NodeId(2) && f.why == why),
        "{f0:?}"
    );
    let member_2 = member_reports(&seen[0])
        .into_iter()
        .find(|r| r.0 == 2)
        .expect("node 2 counted");
    assert!(!member_2.1);
    let complete = completion(&seen[0], Some(t));
    let (finished, failed) = complete.expect("the collective completed");
    assert_eq!(finished + failed, 3);
    assert!(failed >= 1);
    assert!(hosts.iter().all(|h| h.running().next().is_none()));
    assert!(hosts[1].take_failures().is_empty());
}

/// Called off before its Go (a member never answered), the collective is cancelled.
#[test]
fn a_collective_called_off_before_its_go_is_cancelled_everywhere() {
    let mut hosts = vec![host(0, 3), host(1, 3), host(2, 3)];
    let mut q = started_all(&hosts);
    q.push_back((NodeId(0), start(broadcast(3), b"never sent")));
    // Node 2 hears nothing: its Ready never comes.
    let silent = |to: NodeId, _: &Message| {
        if to == NodeId(2) {
            Route::Drop
        } else {
            Route::Deliver
        }
    };
    let (seen, _, _) = pump_routed(&mut hosts, q, silent);
    let t = started_transfer(&seen[0]);
    let (seen, _, _) = pump_routed(&mut hosts, [(NodeId(0), abort(t, "gone"))].into(), silent);
    assert!(seen[0].contains(&Output::Report(Report::CollectiveRefused { transfer: t })));
    assert!(seen[1].contains(&Output::Report(Report::CollectiveRefused { transfer: t })));
    assert!(delivered(&seen[1]).is_empty());
    assert!(hosts[0].running().next().is_none());
    assert!(hosts[1].running().next().is_none());
}

/// A shelf that keeps pieces in memory and hands a restarted member the first `kept` pieces
/// of `data` (as a piece file would after a restart); it records what it was asked and kept.
struct TestShelf {
    data: Bytes,
    piece: usize,
    kept: u32,
    calls: Mutex<Vec<(TransferId, bool)>>,
    keeper: Arc<Kept>,
}

#[derive(Default)]
struct Kept(Mutex<Vec<u32>>);

impl PieceKeeper for Kept {
    fn keep(&self, piece: u32, _offset: u64, data: Bytes) -> Bytes {
        self.0.lock().unwrap().push(piece);
        data
    }
}

impl PieceShelf for TestShelf {
    fn shelf(
        &self,
        transfer: TransferId,
        _spec: &CollectiveSpec,
        total_len: u64,
        rejoin: bool,
    ) -> Result<Shelved, String> {
        assert_eq!(total_len, self.data.len() as u64);
        self.calls.lock().unwrap().push((transfer, rejoin));
        let held = if rejoin {
            (0..self.kept)
                .map(|i| {
                    let at = i as usize * self.piece;
                    (i, self.data.slice(at..at + self.piece))
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(Shelved {
            keeper: Some(self.keeper.clone()),
            held,
        })
    }

    fn resumed_bytes(&self, transfer: TransferId) -> Option<u64> {
        let calls = self.calls.lock().unwrap();
        calls
            .contains(&(transfer, true))
            .then_some(u64::from(self.kept) * self.piece as u64)
    }
}

/// `pieces` pieces of `piece` bytes, and a MOB multicast of them.
fn mob_of(pieces: u32, piece: usize) -> (Bytes, CollectiveSpec) {
    let data: Bytes = (0..pieces as usize * piece)
        .map(|i| (i * 7 % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    let manifest = Manifest::build(&data, piece as u32).unwrap();
    let spec = CollectiveSpec::Multicast {
        protocol: MulticastProtocol::Mob,
        params: MulticastParams::of(&MulticastSpec::Mob(MobConfig::default())),
        manifest: ManifestSpec::of(&manifest),
    };
    (data, spec)
}

/// Issue 8's restart through the Host: a MOB receiver is lost mid-run and its new life joins
/// again; the initiator takes it back, its shelf hands it the 4 pieces its earlier life kept,
/// and it fetches only the other 4, keeps them, delivers all the data, and the collective
/// completes with every member finished. Node 3 is held (its data frames wait) so the run is
/// still going when the restarted member comes back.
#[test]
fn a_restarted_member_resumes_from_its_shelf_and_fetches_only_the_rest() {
    let (pieces, piece) = (8u32, 16usize);
    let (data, spec) = mob_of(pieces, piece);
    let shelf = Arc::new(TestShelf {
        data: data.clone(),
        piece,
        kept: 4,
        calls: Mutex::new(Vec::new()),
        keeper: Arc::new(Kept::default()),
    });
    let shelved = |me: u32| {
        let mut c = HostConfig::new(NodeId(me), members(4), 1);
        c.heartbeat = None;
        c.shelf = Some(shelf.clone());
        Host::new(c).unwrap()
    };
    let mut hosts = vec![host(0, 4), host(1, 4), shelved(2), host(3, 4)];
    let mut q = started_all(&hosts);
    q.push_back((
        NodeId(0),
        Input::App(App::new(AppRequest::StartCollective {
            spec,
            data: data.clone(),
            transfer: None,
        })),
    ));
    let is_piece = |m: &Message| matches!(m, Message::Pieces(PieceMsg::Piece(_)));
    // The first life of node 2 gets no piece (it dies); node 3's data frames wait.
    let (seen, _, held) = pump_routed(&mut hosts, q, |to, m| match to.0 {
        2 if is_piece(m) => Route::Drop,
        3 if !matches!(m, Message::Session(_)) => Route::Hold,
        _ => Route::Deliver,
    });
    let t = started_transfer(&seen[0]);
    assert_eq!(shelf.calls.lock().unwrap().clone(), vec![(t, false)]);
    assert_eq!(hosts[0].running().collect::<Vec<_>>(), vec![t]);

    // Node 2 restarts: a new host, the same shelf; then node 3 is continued.
    hosts[2] = shelved(2);
    let mut q: VecDeque<(NodeId, Input)> = [(NodeId(2), Input::Start)].into();
    q.extend(held);
    let to_2 = std::cell::Cell::new(0u32);
    let (seen, _, _) = pump_routed(&mut hosts, q, |to, m| {
        if to == NodeId(2) && is_piece(m) {
            to_2.set(to_2.get() + 1);
        }
        Route::Deliver
    });
    assert_eq!(
        shelf.calls.lock().unwrap().clone(),
        vec![(t, false), (t, true)]
    );
    assert!(seen[0].contains(&Output::Report(Report::PeerRejoined {
        peer: NodeId(2),
        transfer: t
    })));
    assert_eq!(
        to_2.get(),
        pieces - 4,
        "pieces fetched by the restarted member"
    );
    // Every piece went through the keeper: the 4 fetched, and the 4 resumed (verified, then
    // stored again; a piece file writes them in place).
    let mut kept = shelf.keeper.0.lock().unwrap().clone();
    kept.sort_unstable();
    assert_eq!(kept, (0..pieces).collect::<Vec<_>>());
    assert_eq!(delivered(&seen[2]), data.to_vec());
    assert!(
        seen[0].contains(&Output::Report(Report::CollectiveComplete {
            transfer: t,
            finished: 4,
            failed: 0
        }))
    );
    // The restarted life's report says what it resumed; only the initiator hears it.
    let resumed = |outs: &[Output]| -> Vec<(NodeId, u64)> {
        outs.iter()
            .filter_map(|o| match o {
                Output::Report(Report::MemberDone {
                    member,
                    resumed_bytes: Some(b),
                    ..
                }) => Some((*member, *b)),
                _ => None,
            })
            .collect()
    };
    assert_eq!(resumed(&seen[0]), vec![(NodeId(2), 4 * piece as u64)]);
    assert!(resumed(&seen[2]).is_empty());
    assert!(hosts.iter().all(|h| h.running().next().is_none()));
}

/// A member that finished its part and then restarted while the collective still runs (node
/// 3 is held) is taken back: its new life gets the data again instead of waiting for a
/// collective nobody announces to it, and the collective completes with each member counted
/// once.
#[test]
fn a_member_restarted_after_it_finished_is_taken_back() {
    let data: &'static [u8] = b"0123456789abcdefghijklmnopqrstuv";
    let mut hosts: Vec<Host> = (0..4).map(|i| host(i, 4)).collect();
    let mut q = started_all(&hosts);
    q.push_back((NodeId(0), start(broadcast(4), data)));
    let (seen, _, held) = pump_routed(&mut hosts, q, |to, m| match to.0 {
        3 if !matches!(m, Message::Session(_)) => Route::Hold,
        _ => Route::Deliver,
    });
    let t = started_transfer(&seen[0]);
    assert_eq!(delivered(&seen[2]), data.to_vec());
    assert!(seen[0].iter().any(|o| matches!(
        o,
        Output::Report(Report::MemberDone {
            member: NodeId(2),
            finished: true,
            ..
        })
    )));
    assert_eq!(hosts[0].running().collect::<Vec<_>>(), vec![t]);

    // Node 2 restarts (a new host) while node 3 is still held; then node 3 is continued.
    hosts[2] = host(2, 4);
    let mut q: VecDeque<(NodeId, Input)> = [(NodeId(2), Input::Start)].into();
    q.extend(held);
    let seen = pump(&mut hosts, q);
    assert!(seen[0].contains(&Output::Report(Report::PeerRejoined {
        peer: NodeId(2),
        transfer: t
    })));
    assert_eq!(delivered(&seen[2]), data.to_vec(), "the new life's data");
    assert!(
        seen[0].contains(&Output::Report(Report::CollectiveComplete {
            transfer: t,
            finished: 4,
            failed: 0
        })),
        "{:?}",
        seen[0]
    );
    assert!(hosts.iter().all(|h| h.running().next().is_none()));
}

/// Members of a broadcast tell the initiator how much they hold every 1/16 of the data (at
/// least 1 MiB apart), keyed to bytes, so the initiator's application can draw a progress bar;
/// the last bytes are the member's Done, and a small collective sends no progress at all.
#[test]
fn members_report_their_progress_to_the_initiator_every_sixteenth() {
    let big: &'static [u8] = Box::leak(vec![7u8; 32 << 20].into_boxed_slice());
    let spec = CollectiveSpec::Broadcast {
        tree: TreeSpec::of(&binomial_all(3, NodeId(0)).unwrap()),
        segment_bytes: 1 << 20,
        max_frame_payload: 1 << 20,
    };
    let mut hosts: Vec<Host> = (0..3).map(|i| host(i, 3)).collect();
    let mut q = started_all(&hosts);
    q.push_back((NodeId(0), start(spec, big)));
    let (seen, sent, _) = pump_routed(&mut hosts, q, |_, _| Route::Deliver);
    for member in [1u32, 2] {
        let told: Vec<u64> = sent
            .iter()
            .filter_map(|(from, to, m)| match m {
                SessionMsg::Progress { bytes, .. } if from.0 == member && to.0 == 0 => Some(*bytes),
                _ => None,
            })
            .collect();
        let step = (32u64 << 20) / 16;
        assert_eq!(
            told,
            (1..16).map(|k| k * step).collect::<Vec<_>>(),
            "member {member}"
        );
        let reported: Vec<u64> = seen[0]
            .iter()
            .filter_map(|o| match o {
                Output::Report(Report::MemberProgress {
                    member: m, bytes, ..
                }) if m.0 == member => Some(*bytes),
                _ => None,
            })
            .collect();
        assert_eq!(reported, told, "member {member}");
    }
    // 32 bytes: no progress, only Done.
    let mut hosts: Vec<Host> = (0..3).map(|i| host(i, 3)).collect();
    let mut q = started_all(&hosts);
    q.push_back((
        NodeId(0),
        start(broadcast(3), b"0123456789abcdefghijklmnopqrstuv"),
    ));
    let (_, sent, _) = pump_routed(&mut hosts, q, |_, _| Route::Deliver);
    assert!(!sent
        .iter()
        .any(|(_, _, m)| matches!(m, SessionMsg::Progress { .. })));
}

/// A scatter's members each report the share they kept and computed: the initiator hears,
/// per member, the share's place in the load and the digest of its bytes, the shares tile the
/// load, and each digest is the root's own bytes at that place. A share report's length does
/// not depend on its values either.
#[test]
fn scatter_members_report_the_share_they_computed() {
    use windrose_proto::host::{MemberReport, ShareReport};
    use windrose_trees::dlt::{self, OrderPolicy};
    let data: &'static [u8] = b"a load of bytes cut into shares, one per member of the group";
    let tree = binomial_all(4, NodeId(0)).unwrap();
    let schedule = dlt::schedule(
        &tree,
        &[1.0, 2.0, 3.0, 4.0],
        &[0.5; 4],
        OrderPolicy::Optimal,
    )
    .unwrap();
    let spec = CollectiveSpec::Scatter {
        schedule,
        max_frame_payload: 8,
        parallel: false,
    };
    let mut hosts: Vec<Host> = (0..4).map(|i| digesting(i, 4, true)).collect();
    let mut queue = started_all(&hosts);
    queue.push_back((NodeId(0), start(spec, data)));
    let seen = pump(&mut hosts, queue);
    let mut shares: Vec<(u32, ComputedShare)> = seen[0]
        .iter()
        .filter_map(|o| match o {
            Output::Report(Report::MemberDone {
                member,
                finished: true,
                share: Some(s),
                ..
            }) => Some((member.0, *s)),
            _ => None,
        })
        .collect();
    assert_eq!(shares.len(), 4, "{:?}", seen[0]);
    shares.sort_by_key(|(_, s)| s.offset);
    let mut at = 0;
    for (member, s) in &shares {
        assert_eq!(s.offset, at, "member {member}'s share");
        let bytes = &data[s.offset as usize..(s.offset + s.len) as usize];
        assert_eq!(s.digest, *blake3::hash(bytes).as_bytes(), "member {member}");
        assert!(s.computed.is_some());
        at += s.len;
    }
    assert_eq!(at, data.len() as u64);
    // Not for a broadcast, whose members compute nothing.
    let done = |share: Option<ComputedShare>| SessionMsg::Done {
        transfer: TransferId(7),
        report: MemberReport {
            finished: true,
            error: None,
            bytes_delivered: 5,
            digest: None,
            elapsed_ns: Some(1),
            resumed_bytes: None,
            share: share.as_ref().map(ShareReport::of),
            phases: Vec::new(),
        },
    };
    let lens: Vec<usize> = [
        (0, 0, Some(Duration::ZERO)),
        (123_456, u64::MAX, Some(Duration::from_secs(99))),
    ]
    .map(|(offset, len, computed)| {
        let s = ComputedShare {
            offset,
            len,
            digest: [7; 32],
            computed,
        };
        frame::encode(&done(Some(s)).to_message()).unwrap().len()
    })
    .to_vec();
    assert_eq!(lens[0], lens[1]);
    let s = ComputedShare {
        offset: 3,
        len: 9,
        digest: [1; 32],
        computed: Some(Duration::from_nanos(42)),
    };
    let Message::Session(f) = done(Some(s)).to_message() else {
        unreachable!()
    };
    assert_eq!(SessionMsg::from_frame(&f).unwrap(), done(Some(s)));
}

/// A host that was not running (its heartbeat tick fires late: a loaded machine, a stopped
/// process) does not count its own pause as its peers' silence; a peer that stays silent
/// while the host runs is declared down.
#[test]
fn a_late_tick_is_not_the_peers_silence() {
    let mut c = HostConfig::new(NodeId(0), members(2), 1);
    c.heartbeat = Some(Duration::from_millis(500));
    c.silent_after = Duration::from_secs(2);
    let mut h = Host::new(c).unwrap();
    let mut out = Outputs::new();
    let t = |ms: u64| Time::from_nanos(ms * 1_000_000);
    h.handle(t(0), Input::Start, &mut out).unwrap();
    let downs = |out: &mut Outputs| {
        out.drain()
            .filter(|o| matches!(o, Output::Report(Report::PeerDown { .. })))
            .count()
    };
    h.handle(t(500), Input::Timer(TimerId(0)), &mut out)
        .unwrap();
    assert_eq!(downs(&mut out), 0);
    // The next tick was due at 1 s; the host ran again only at 4 s.
    h.handle(t(4_000), Input::Timer(TimerId(0)), &mut out)
        .unwrap();
    assert_eq!(
        downs(&mut out),
        0,
        "the host's own pause is not node 1's silence"
    );
    // Ticks on time from now on, node 1 still silent: down once it has been silent for 2 s
    // of the host's running time (0-1 s and 4-5 s).
    let mut at = 4_000;
    let mut down_at = None;
    while down_at.is_none() && at < 10_000 {
        at += 500;
        h.handle(t(at), Input::Timer(TimerId(0)), &mut out).unwrap();
        if downs(&mut out) > 0 {
            down_at = Some(at);
        }
    }
    assert_eq!(down_at, Some(5_000));
}

/// A member whose collective's initiator is lost mid-run ends its part at once, failed with
/// the reason, and can leave: nobody else would count its part or close the collective.
#[test]
fn a_member_that_loses_the_initiator_ends_its_part() {
    let mut hosts: Vec<Host> = (0..3).map(|i| host(i, 3)).collect();
    let mut queue = started_all(&hosts);
    queue.push_back((NodeId(0), start(broadcast(3), b"0123456789abcdef")));
    // Every data frame lost: the members wait for the root's bytes.
    let (seen, _, _) = pump_routed(&mut hosts, queue, |_, m| {
        if matches!(m, Message::Broadcast(_)) {
            Route::Drop
        } else {
            Route::Deliver
        }
    });
    assert!(!seen[1]
        .iter()
        .any(|o| matches!(o, Output::Report(Report::CollectiveEnded { .. }))));
    let mut out = Outputs::new();
    hosts[1]
        .handle(
            Time::from_secs_f64(1.0),
            Input::PeerFailed(NodeId(0)),
            &mut out,
        )
        .unwrap();
    let outs: Vec<Output> = out.drain().collect();
    let ended: Vec<bool> = outs
        .iter()
        .filter_map(|o| match o {
            Output::Report(Report::CollectiveEnded { finished, .. }) => Some(*finished),
            _ => None,
        })
        .collect();
    assert_eq!(ended, vec![false], "{outs:?}");
    let why = hosts[1].take_failures();
    // The broadcast's machine hears its parent failed first; the Host words it as the loss of
    // the initiator, as it does when it notices first.
    assert!(
        why.iter()
            .any(|f| f.why == "lost the collective's initiator, node 0"),
        "{why:?}"
    );
    hosts[1]
        .handle(
            Time::from_secs_f64(2.0),
            Input::App(App::new(AppRequest::Leave)),
            &mut out,
        )
        .unwrap();
    let outs: Vec<Output> = out.drain().collect();
    assert!(
        outs.iter().any(|o| matches!(o, Output::Finished)),
        "{outs:?}"
    );
}

/// Issue 21, defect 2: the initiator's own data no longer matches the manifest it announced
/// (its file changed after the manifest was made). Its machine finds it before it sends the
/// changed piece, and the host calls the whole collective off: every member ends at once with
/// the reason, instead of waiting for a piece no one can send.
#[test]
fn an_initiator_whose_data_changed_calls_the_multicast_off_everywhere() {
    let (pieces, piece) = (8u32, 16usize);
    let (data, spec) = mob_of(pieces, piece);
    let mut changed = data.to_vec();
    changed[3 * piece + 1] ^= 0x10;
    let mut hosts = vec![host(0, 4), host(1, 4), host(2, 4), host(3, 4)];
    let mut q = started_all(&hosts);
    q.push_back((
        NodeId(0),
        Input::App(App::new(AppRequest::StartCollective {
            spec,
            data: Bytes::from(changed),
            transfer: None,
        })),
    ));
    let seen = pump(&mut hosts, q);
    let t = started_transfer(&seen[0]);
    let why = "the root's data no longer matches its manifest at piece 3";
    for (m, seen_m) in seen.iter().enumerate().skip(1) {
        assert!(
            seen_m.contains(&Output::Report(Report::CollectiveEnded {
                transfer: t,
                finished: false
            })),
            "member {m} did not end"
        );
        let f = hosts[m].take_failures();
        assert!(
            f.iter()
                .any(|f| f.why.starts_with("node 0 called the collective off")
                    && f.why.contains(why)),
            "member {m}: {f:?}"
        );
    }
    let complete = completion(&seen[0], Some(t));
    assert_eq!(complete, Some((0, 4)), "{:?}", seen[0]);
    assert!(hosts.iter().all(|h| h.running().next().is_none()));
}
