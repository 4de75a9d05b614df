//! Eager sessions that relay the announcement along the tree (`HostConfig::relay_announce`,
//! issue 17): a member starts on its tree parent's copy of the root's announcement, the root's
//! direct copy stays the fallback, late copies never start an ended collective again, keyed
//! groups' announcement MACs travel unchanged, and collectives that are not one tree are not
//! relayed. Frames go through the real wire format, one at a time, in a fixed order.

use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::Arc;
use windrose_model::{ClusterId, NodeId};
use windrose_proto::collective::{CollectiveSpec, ManifestSpec, MulticastParams, TreeSpec};
use windrose_proto::frame::{self, Decoder, Message, TransferId};
use windrose_proto::host::{AnnounceAuth, App, AppRequest, Host, HostConfig, SessionMsg};
use windrose_proto::mob::MobConfig;
use windrose_proto::multicast::{MulticastProtocol, MulticastSpec};
use windrose_proto::pieces::Manifest;
use windrose_proto::{Input, Output, Outputs, Protocol, Report, Time};

use crate::support::host_outputs;
use host_outputs::{completion, delivered};

fn members(n: u32) -> Arc<[(NodeId, ClusterId)]> {
    (0..n).map(|i| (NodeId(i), ClusterId(0))).collect()
}

/// An eager host of a group of `n`, relaying when `relay`, with `auth` when given.
fn host(me: u32, n: u32, relay: bool, auth: Option<Arc<dyn AnnounceAuth>>) -> Host {
    let mut c = HostConfig::new(NodeId(me), members(n), 1);
    c.heartbeat = None;
    c.eager = true;
    c.relay_announce = relay;
    c.announce_auth = auth;
    Host::new(c).unwrap()
}

fn hosts(n: u32, relay: bool) -> Vec<Host> {
    (0..n).map(|i| host(i, n, relay, None)).collect()
}

/// The chain 0 -> 1 -> 2 -> 3 as a broadcast's tree: nodes 2 and 3 are below the root's
/// children.
fn chain() -> CollectiveSpec {
    CollectiveSpec::Broadcast {
        tree: TreeSpec {
            node_count: 4,
            root: NodeId(0),
            edges: vec![
                (NodeId(1), NodeId(0)),
                (NodeId(2), NodeId(1)),
                (NodeId(3), NodeId(2)),
            ],
        },
        segment_bytes: 8,
        max_frame_payload: 8,
    }
}

const DATA: &[u8] = b"down the tree, not across it";

fn start(spec: CollectiveSpec, data: Bytes) -> Input {
    Input::App(App::new(AppRequest::StartCollective {
        spec,
        data,
        transfer: Some(TransferId(40)),
    }))
}

/// What becomes of a frame.
enum Fate {
    Deliver,
    /// Held back until nothing else moves.
    Defer,
    Drop,
    /// Kept aside and returned.
    Hold,
    /// Delivered as this message instead.
    Alter(Message),
}

/// One run's record.
#[derive(Default)]
struct Run {
    /// Each node's non-send outputs, in order.
    seen: Vec<Vec<Output>>,
    /// Every session message sent: (from, to, message).
    sessions: Vec<(NodeId, NodeId, SessionMsg)>,
    /// Inputs a node refused: (node, error).
    errors: Vec<(NodeId, String)>,
    /// Frames kept aside: (to, input).
    aside: VecDeque<(NodeId, Input)>,
}

/// Delivers every frame through the wire format as `route(from, to, message)` says until
/// nothing moves. Nodes in `dead` take no input.
fn pump(
    hosts: &mut [Host],
    mut queue: VecDeque<(NodeId, Input)>,
    dead: &[u32],
    route: impl Fn(NodeId, NodeId, &Message) -> Fate,
) -> Run {
    let mut run = Run {
        seen: vec![Vec::new(); hosts.len()],
        ..Run::default()
    };
    let mut deferred = VecDeque::new();
    let mut out = Outputs::new();
    let mut step = 0u64;
    while let Some((node, input)) = queue.pop_front().or_else(|| deferred.pop_front()) {
        step += 1;
        assert!(step < 100_000, "the run does not end");
        if dead.contains(&node.0) {
            continue;
        }
        if let Err(e) = hosts[node.index()].handle(Time::from_nanos(step), input, &mut out) {
            run.errors.push((node, e.to_string()));
        }
        for o in out.drain() {
            let Output::Send(t) = o else {
                run.seen[node.index()].push(o);
                continue;
            };
            if let Some(id) = t.notify {
                queue.push_back((node, Input::SendComplete { to: t.to, id }));
            }
            let mut d = Decoder::new();
            d.push(&frame::encode(&t.message).unwrap());
            let message = d.next_message().unwrap().unwrap();
            if let Message::Session(f) = &message {
                run.sessions
                    .push((node, t.to, SessionMsg::from_frame(f).unwrap()));
            }
            let fate = route(node, t.to, &message);
            let input = |message| Input::Message {
                from: node,
                message,
            };
            match fate {
                Fate::Deliver => queue.push_back((t.to, input(message))),
                Fate::Defer => deferred.push_back((t.to, input(message))),
                Fate::Drop => {}
                Fate::Hold => run.aside.push_back((t.to, input(message))),
                Fate::Alter(m) => queue.push_back((t.to, input(m))),
            }
        }
    }
    run
}

fn starts(n: u32) -> VecDeque<(NodeId, Input)> {
    (0..n).map(|i| (NodeId(i), Input::Start)).collect()
}

fn is_announce(m: &Message) -> bool {
    matches!(m, Message::Session(f)
        if matches!(SessionMsg::from_frame(f), Ok(SessionMsg::Announce { .. })))
}

/// The root's direct announcement to a node that is not its child in [`chain`].
fn direct_below(from: NodeId, to: NodeId, m: &Message) -> bool {
    from == NodeId(0) && to.0 >= 2 && is_announce(m)
}

/// A relayed copy (an announcement from a node that is not the root).
fn relayed(from: NodeId, m: &Message) -> bool {
    from != NodeId(0) && is_announce(m)
}

fn started_count(seen: &[Output]) -> usize {
    seen.iter()
        .filter(|o| matches!(o, Output::Report(Report::CollectiveStarted { .. })))
        .count()
}

/// With the root's direct copies to nodes 2 and 3 lost, the relayed copies alone start them:
/// node 1 relays to 2, node 2 to 3, each exactly once. Without the relay the same run leaves
/// them holding their parents' data for an announcement that never comes.
#[test]
fn members_start_on_their_parents_copy_when_the_roots_is_lost() {
    let mut q = starts(4);
    q.push_back((NodeId(0), start(chain(), Bytes::from_static(DATA))));
    let mut h = hosts(4, true);
    let run = pump(&mut h, q.clone(), &[], |from, to, m| {
        if direct_below(from, to, m) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    assert!(run.errors.is_empty(), "{:?}", run.errors);
    for i in 1..4 {
        assert_eq!(delivered(&run.seen[i]), DATA.to_vec(), "node {i}");
    }
    assert_eq!(completion(&run.seen[0], None), Some((4, 0)));
    let relays: Vec<(u32, u32)> = run
        .sessions
        .iter()
        .filter(|(f, _, m)| f.0 != 0 && matches!(m, SessionMsg::Announce { .. }))
        .map(|(f, t, _)| (f.0, t.0))
        .collect();
    assert_eq!(relays, vec![(1, 2), (2, 3)]);
    assert!(h.iter().all(|x| x.running().next().is_none()));

    let mut h = hosts(4, false);
    let run = pump(&mut h, q, &[], |from, to, m| {
        if direct_below(from, to, m) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    assert_eq!(delivered(&run.seen[1]), DATA.to_vec());
    assert!(delivered(&run.seen[2]).is_empty());
    assert!(delivered(&run.seen[3]).is_empty());
    assert_eq!(completion(&run.seen[0], None), None);
}

/// A chain broadcast over 4 relaying hosts where one copy of each announcement comes late
/// (held aside when `hold`, else deferred): the relayed copies when `relayed_late`, else the
/// root's direct copies to the members below its child.
fn chain_with_a_late_copy(relayed_late: bool, hold: bool) -> (Vec<Host>, Run) {
    let mut q = starts(4);
    q.push_back((NodeId(0), start(chain(), Bytes::from_static(DATA))));
    let mut h = hosts(4, true);
    let run = pump(&mut h, q, &[], |from, to, m| {
        let is_late = if relayed_late {
            relayed(from, m)
        } else {
            direct_below(from, to, m)
        };
        if is_late && hold {
            Fate::Hold
        } else if is_late {
            Fate::Defer
        } else {
            Fate::Deliver
        }
    });
    (h, run)
}

/// With every copy delivered, each member takes the first and drops the other quietly: one
/// start per member, no error, every member finished.
#[test]
fn a_member_takes_the_first_copy_and_drops_the_other() {
    for defer_relayed in [false, true] {
        let (_, run) = chain_with_a_late_copy(defer_relayed, false);
        assert!(run.errors.is_empty(), "{:?}", run.errors);
        for i in 1..4 {
            assert_eq!(delivered(&run.seen[i]), DATA.to_vec(), "node {i}");
            assert_eq!(started_count(&run.seen[i]), 1, "node {i}");
        }
        assert_eq!(completion(&run.seen[0], None), Some((4, 0)));
    }
}

/// A copy that arrives after the collective ended (the root's direct one, or a relayed one)
/// is dropped quietly and starts nothing: no machine, no report, no frame.
#[test]
fn a_late_copy_never_starts_an_ended_collective_again() {
    for hold_relayed in [false, true] {
        let (mut h, run) = chain_with_a_late_copy(hold_relayed, true);
        assert!(run.errors.is_empty(), "{:?}", run.errors);
        assert_eq!(completion(&run.seen[0], None), Some((4, 0)));
        assert_eq!(run.aside.len(), 2, "hold_relayed {hold_relayed}");
        assert!(h.iter().all(|x| x.running().next().is_none()));
        let late = pump(&mut h, run.aside, &[], |_, _, _| Fate::Deliver);
        assert!(late.errors.is_empty(), "{:?}", late.errors);
        assert!(late.seen.iter().all(|s| s.is_empty()), "{:?}", late.seen);
        assert!(late.sessions.is_empty(), "{:?}", late.sessions);
        assert!(h.iter().all(|x| x.running().next().is_none()));
    }
}

/// Node 1 is dead before the collective starts (every host knows), so it relays nothing:
/// node 2 starts on the root's direct copy, re-attaches to the root as an orphan, relays to
/// node 3, and both get the data; the root completes with the three live members (node 1
/// was out before the start, so it is not counted).
#[test]
fn a_child_whose_parent_died_before_relaying_takes_part_on_the_roots_copy() {
    let mut q = starts(4);
    for i in [0u32, 2, 3] {
        q.push_back((NodeId(i), Input::PeerFailed(NodeId(1))));
    }
    q.push_back((NodeId(0), start(chain(), Bytes::from_static(DATA))));
    let mut h = hosts(4, true);
    let run = pump(&mut h, q, &[1], |_, _, _| Fate::Deliver);
    assert!(run.errors.is_empty(), "{:?}", run.errors);
    assert_eq!(delivered(&run.seen[2]), DATA.to_vec());
    assert_eq!(delivered(&run.seen[3]), DATA.to_vec());
    assert_eq!(completion(&run.seen[0], None), Some((3, 0)));
    // Node 3's copy came from node 2: the root's direct copy was not needed, but went out.
    let to3: Vec<u32> = run
        .sessions
        .iter()
        .filter(|(_, t, m)| t.0 == 3 && matches!(m, SessionMsg::Announce { .. }))
        .map(|(f, _, _)| f.0)
        .collect();
    assert_eq!(to3, vec![0, 2]);
}

/// A copy from a member that is not the receiver's parent in the announced tree is refused
/// (it would let any member announce for another root); a member that does not relay
/// ignores its parent's copy and waits for the root's.
#[test]
fn only_the_tree_parent_may_relay() {
    let root_copy = |h: &mut Host| {
        let mut out = Outputs::new();
        h.handle(
            Time::ZERO,
            start(chain(), Bytes::from_static(DATA)),
            &mut out,
        )
        .unwrap();
        let copy = out
            .drain()
            .find_map(|o| match o {
                Output::Send(t) if t.to == NodeId(3) && is_announce(&t.message) => Some(t.message),
                _ => None,
            })
            .unwrap();
        copy
    };
    let copy = root_copy(&mut host(0, 4, true, None));
    for (relay, from, refused) in [(true, 1u32, true), (false, 1, true), (false, 2, false)] {
        let mut h3 = host(3, 4, relay, None);
        let mut out = Outputs::new();
        h3.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        out.clear();
        let r = h3.handle(
            Time::ZERO,
            Input::Message {
                from: NodeId(from),
                message: copy.clone(),
            },
            &mut out,
        );
        match r {
            Err(e) => {
                assert!(refused, "{e}");
                assert!(e.to_string().contains("rooted at another node"), "{e}");
            }
            Ok(()) => assert!(!refused, "relay {relay}, from {from}"),
        }
        assert!(out.is_empty());
        assert_eq!(h3.running().count(), 0);
        // The root's own copy still starts it.
        h3.handle(
            Time::ZERO,
            Input::Message {
                from: NodeId(0),
                message: copy.clone(),
            },
            &mut out,
        )
        .unwrap();
        assert_eq!(h3.running().count(), 1);
    }
}

/// A keyed group whose key MACs whole announcements: a BLAKE3 keyed hash, as a driver
/// holding a group key would make.
struct KeyedAnnouncements([u8; 32]);

impl AnnounceAuth for KeyedAnnouncements {
    fn seal(&self, _spec: &mut CollectiveSpec, _total_len: u64) {}
    fn check(&self, _spec: &CollectiveSpec, _total_len: u64) -> Option<String> {
        None
    }
    fn announce_mac(&self, announcement: &[u8]) -> Option<String> {
        Some(
            blake3::keyed_hash(&self.0, announcement)
                .to_hex()
                .to_string(),
        )
    }
}

fn keyed(n: u32, key: u8) -> Vec<Host> {
    let auth: Arc<dyn AnnounceAuth> = Arc::new(KeyedAnnouncements([key; 32]));
    (0..n)
        .map(|i| host(i, n, true, Some(auth.clone())))
        .collect()
}

/// In a keyed group the relayed copies carry the root's MAC unchanged and verify: with the
/// root's direct copies to 2 and 3 lost, everyone finishes on them. A relayed copy altered on
/// its way (node 3 cut off through `excluded`, the MAC kept) is refused with an error that
/// names the relay, and node 2 takes the root's direct copy instead.
#[test]
fn a_keyed_relayed_copy_verifies_and_an_altered_one_is_refused() {
    let mut q = starts(4);
    q.push_back((NodeId(0), start(chain(), Bytes::from_static(DATA))));
    let mut h = keyed(4, 7);
    let run = pump(&mut h, q.clone(), &[], |from, to, m| {
        if direct_below(from, to, m) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    assert!(run.errors.is_empty(), "{:?}", run.errors);
    assert!(run.sessions.iter().all(|(_, _, m)| match m {
        SessionMsg::Announce { mac, .. } => mac.as_ref().is_some_and(|m| m.len() == 64),
        _ => true,
    }));
    for i in 1..4 {
        assert_eq!(delivered(&run.seen[i]), DATA.to_vec(), "node {i}");
    }
    assert_eq!(completion(&run.seen[0], None), Some((4, 0)));

    let alter = |m: &Message| {
        let Message::Session(f) = m else {
            unreachable!()
        };
        let mut msg = SessionMsg::from_frame(f).unwrap();
        if let SessionMsg::Announce { excluded, .. } = &mut msg {
            excluded.push(NodeId(3));
        }
        msg.to_message()
    };
    let mut h = keyed(4, 7);
    let run = pump(&mut h, q, &[], |from, to, m| {
        if from == NodeId(1) && to == NodeId(2) && is_announce(m) {
            Fate::Alter(alter(m))
        } else if direct_below(from, to, m) {
            Fate::Defer
        } else {
            Fate::Deliver
        }
    });
    assert_eq!(run.errors.len(), 1, "{:?}", run.errors);
    let (node, e) = &run.errors[0];
    assert_eq!(*node, NodeId(2));
    assert!(
        e.contains("node 1") && e.contains("fails the group's check"),
        "{e}"
    );
    for i in 1..4 {
        assert_eq!(delivered(&run.seen[i]), DATA.to_vec(), "node {i}");
    }
    assert_eq!(completion(&run.seen[0], None), Some((4, 0)));
}

/// A keyed member refuses a direct announcement made without the key or with another one,
/// with the reason, and the root counts it failed.
#[test]
fn a_keyed_member_refuses_an_announcement_without_a_good_mac() {
    for root_key in [None, Some(9u8)] {
        let auth = |k: u8| -> Arc<dyn AnnounceAuth> { Arc::new(KeyedAnnouncements([k; 32])) };
        let mut h: Vec<Host> = (0..2)
            .map(|i| {
                let a = if i == 0 {
                    root_key.map(auth)
                } else {
                    Some(auth(7))
                };
                host(i, 2, true, a)
            })
            .collect();
        let spec = CollectiveSpec::Broadcast {
            tree: TreeSpec {
                node_count: 2,
                root: NodeId(0),
                edges: vec![(NodeId(1), NodeId(0))],
            },
            segment_bytes: 8,
            max_frame_payload: 8,
        };
        let mut q = starts(2);
        q.push_back((NodeId(0), start(spec, Bytes::from_static(DATA))));
        let run = pump(&mut h, q, &[], |_, _, _| Fate::Deliver);
        let why = run
            .sessions
            .iter()
            .find_map(|(_, _, m)| match m {
                SessionMsg::Refuse { reason, .. } => Some(reason.clone()),
                _ => None,
            })
            .unwrap();
        let want = if root_key.is_none() {
            "carries no MAC"
        } else {
            "does not match"
        };
        assert!(why.contains(want), "{why}");
        assert!(delivered(&run.seen[1]).is_empty());
        assert_eq!(completion(&run.seen[0], None), Some((1, 1)));
    }
}

/// A MOB multicast is not one tree: with the relay on, only the root announces it.
#[test]
fn collectives_that_are_not_one_tree_are_not_relayed() {
    let data: Bytes = (0..64u32).map(|i| i as u8).collect::<Vec<u8>>().into();
    let manifest = Manifest::build(&data, 16).unwrap();
    let spec = CollectiveSpec::Multicast {
        protocol: MulticastProtocol::Mob,
        params: MulticastParams::of(&MulticastSpec::Mob(MobConfig::default())),
        manifest: ManifestSpec::of(&manifest),
    };
    let mut q = starts(4);
    q.push_back((NodeId(0), start(spec, data.clone())));
    let mut h = hosts(4, true);
    let run = pump(&mut h, q, &[], |_, _, _| Fate::Deliver);
    assert!(run.errors.is_empty(), "{:?}", run.errors);
    let announcers: Vec<u32> = run
        .sessions
        .iter()
        .filter(|(_, _, m)| matches!(m, SessionMsg::Announce { .. }))
        .map(|(f, _, _)| f.0)
        .collect();
    assert_eq!(announcers, vec![0, 0, 0]);
    for i in 1..4 {
        assert_eq!(delivered(&run.seen[i]), data.to_vec(), "node {i}");
    }
}

/// The chain's collective started on four relaying hosts with node 2 stopped: everything to
/// it is kept aside (`Run::aside`); the others' part runs, with no error.
fn chain_with_node_2_held(h: &mut [Host]) -> Run {
    let mut q = starts(4);
    q.push_back((NodeId(0), start(chain(), Bytes::from_static(DATA))));
    let run = pump(h, q, &[], |_, to, _| {
        if to == NodeId(2) {
            Fate::Hold
        } else {
            Fate::Deliver
        }
    });
    assert!(run.errors.is_empty(), "{:?}", run.errors);
    run
}

/// Node 2 restarts as the collective starts: its earlier life's frames are lost, except the
/// announcements (the root's direct copy and node 1's relay), which its new life takes before
/// the root has heard its Join. The root then counts the earlier life out and announces the
/// collective again (rejoin): the new life gives up its eager machine (its parent skips it
/// since the Join) for a rejoining one, fetches the data from the root, and every member
/// finishes. Before, the rejoin announcement was refused as a transfer id in use and node 2
/// never got its data.
#[test]
fn a_member_restarted_after_taking_an_eager_copy_is_taken_back_by_the_rejoin() {
    let mut h = hosts(4, true);
    let run = chain_with_node_2_held(&mut h);
    assert_eq!(completion(&run.seen[0], None), None);
    // Its new life: only the announcements kept aside reach it.
    h[2] = host(2, 4, true, None);
    let mut q: VecDeque<(NodeId, Input)> = VecDeque::from([(NodeId(2), Input::Start)]);
    q.extend(
        run.aside
            .into_iter()
            .filter(|(_, i)| matches!(i, Input::Message { message, .. } if is_announce(message))),
    );
    let after = pump(&mut h, q, &[], |_, _, _| Fate::Deliver);
    assert!(after.errors.is_empty(), "{:?}", after.errors);
    assert_eq!(delivered(&after.seen[2]), DATA.to_vec());
    assert_eq!(delivered(&after.seen[3]), DATA.to_vec());
    assert_eq!(completion(&after.seen[0], None), Some((4, 0)));
    assert!(h.iter().all(|x| x.running().next().is_none()));
}

/// As above with the leaf 3 restarting, and its parent's data reaching its new life too
/// (node 1's report held, so the root still awaits it): the new life's eager part finishes and
/// reports before the root's rejoin announcement arrives, which then changes nothing (no
/// error, no second machine), and every member finishes.
#[test]
fn a_rejoin_after_the_new_lifes_part_ended_changes_nothing() {
    let mut h = hosts(4, true);
    let mut q = starts(4);
    q.push_back((NodeId(0), start(chain(), Bytes::from_static(DATA))));
    let done = |m: &Message| {
        matches!(m, Message::Session(f)
            if matches!(SessionMsg::from_frame(f), Ok(SessionMsg::Done { .. })))
    };
    let run = pump(&mut h, q, &[], |from, to, m| {
        if to == NodeId(3) || (from == NodeId(1) && done(m)) {
            Fate::Hold
        } else {
            Fate::Deliver
        }
    });
    assert!(run.errors.is_empty(), "{:?}", run.errors);
    let (to3, to0): (VecDeque<_>, VecDeque<_>) =
        run.aside.into_iter().partition(|(to, _)| *to == NodeId(3));
    h[3] = host(3, 4, true, None);
    let mut q: VecDeque<(NodeId, Input)> = VecDeque::from([(NodeId(3), Input::Start)]);
    q.extend(to3);
    let after = pump(&mut h, q, &[], |_, _, _| Fate::Deliver);
    assert!(after.errors.is_empty(), "{:?}", after.errors);
    assert_eq!(delivered(&after.seen[3]), DATA.to_vec());
    assert_eq!(started_count(&after.seen[3]), 1);
    assert!(after.sessions.iter().any(|(f, t, m)| f.0 == 0
        && t.0 == 3
        && matches!(m, SessionMsg::Announce { rejoin: true, .. })));
    let last = pump(&mut h, to0, &[], |_, _, _| Fate::Deliver);
    assert!(last.errors.is_empty(), "{:?}", last.errors);
    assert_eq!(completion(&last.seen[0], None), Some((4, 0)));
    assert!(h.iter().all(|x| x.running().next().is_none()));
}

/// Node 2 restarts as the collective starts (everything to its earlier life is lost), and its
/// new life's Join reaches node 3 first: node 3 counts the earlier life out and re-attaches to
/// the root. Then the new life takes an eager copy and the data its parent sent before it
/// heard the Join, and forwards that to node 3, its child in the announced tree. Node 3 takes
/// the data from its current parent (the root) and drops the other quietly, before or after
/// its own part ended (`late`): no error (a driver would drop the link to node 2), nothing
/// delivered twice, every member finished. Before, each of those frames was refused as "not
/// this node's parent".
#[test]
fn a_restarted_parents_data_to_a_child_that_re_attached_is_dropped_quietly() {
    for late in [false, true] {
        let mut h = hosts(4, true);
        let run = chain_with_node_2_held(&mut h);
        h[2] = host(2, 4, true, None);
        let mut q: VecDeque<(NodeId, Input)> = VecDeque::from([(NodeId(2), Input::Start)]);
        // What node 1 and the root sent the earlier life reaches the new one.
        q.extend(run.aside);
        let forwarded = std::cell::Cell::new(0);
        let after = pump(&mut h, q, &[], |from, to, m| {
            if (from, to) == (NodeId(2), NodeId(3)) && matches!(m, Message::Broadcast(_)) {
                forwarded.set(forwarded.get() + 1);
                if late {
                    return Fate::Defer;
                }
            }
            Fate::Deliver
        });
        assert!(
            forwarded.get() > 0,
            "node 2 forwarded nothing (late {late})"
        );
        assert!(after.errors.is_empty(), "late {late}: {:?}", after.errors);
        assert_eq!(delivered(&after.seen[2]), DATA.to_vec(), "late {late}");
        assert_eq!(delivered(&after.seen[3]), DATA.to_vec(), "late {late}");
        assert_eq!(
            completion(&after.seen[0], None),
            Some((4, 0)),
            "late {late}"
        );
        assert!(h.iter().all(|x| x.running().next().is_none()));
    }
}
