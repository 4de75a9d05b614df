//! A running tree broadcast leaves a link that slows, between segments (issue 16): the sender
//! hands the slowed child to another of its children, which adopts it from a segment on.
//! A small timed driver: one FIFO connection per ordered pair at its own rate (no sharing),
//! completions when the last byte arrived, failures injected at a time; after every send
//! completion the driver offers the machine its view of the links, as the Host does.

use bytes::Bytes;
use std::collections::BTreeMap;
use windrose_model::NodeId;
use windrose_proto::frame;
use windrose_proto::tree_broadcast::{BroadcastConfig, BroadcastMsg, TreeBroadcast};
use windrose_proto::{Input, LinkPrice, Message, Output, Outputs, Protocol, Time, TransferId};
use windrose_trees::Tree;

const SEG: u64 = 256 << 10;
const FAST: f64 = 100e6;
const SLOW: f64 = 0.5e6;

fn n(i: u32) -> NodeId {
    NodeId(i)
}

enum Event {
    Arrive {
        from: NodeId,
        to: NodeId,
        message: Message,
    },
    Complete {
        at: NodeId,
        to: NodeId,
        id: windrose_proto::SendId,
    },
    Fail(NodeId),
}

/// What a run left: per node the deliveries, and every data frame per link.
#[derive(Default)]
struct Log {
    delivered: BTreeMap<NodeId, Vec<(u64, Bytes)>>,
    data: BTreeMap<(NodeId, NodeId), Vec<u64>>,
    adopts: Vec<(NodeId, NodeId, u64)>,
    finished: BTreeMap<NodeId, usize>,
    aborted: Vec<NodeId>,
}

struct Net {
    /// The slowed link (from, to) and the rate every other link has.
    slow: (NodeId, NodeId),
    /// More links with rates of their own.
    extra: Vec<Extra>,
    /// What the senders believe of the slowed link (their meters from before the change).
    believed: f64,
    fails: Vec<(u64, NodeId)>,
    /// Nodes on the sender's site (the root's) besides it: their links to the slowed child
    /// cross the slowed path too.
    near: Vec<NodeId>,
}

/// A link with its own rate, changing over time.
struct Extra {
    link: (NodeId, NodeId),
    /// What its sender measured on it before.
    believed: f64,
    /// Its rate from a time (ns) on, ascending (the first from 0).
    rates: Vec<(u64, f64)>,
}

/// The rate of `a -> b` for a frame that starts at `at` (ns).
fn rate(net: &Net, a: NodeId, b: NodeId, at: u64) -> f64 {
    if let Some(e) = net.extra.iter().find(|e| e.link == (a, b)) {
        return e
            .rates
            .iter()
            .rev()
            .find(|&&(from, _)| from <= at)
            .map_or(FAST, |&(_, r)| r);
    }
    if (a, b) == net.slow || (net.near.contains(&a) && b == net.slow.1) {
        SLOW
    } else {
        FAST
    }
}

fn run(tree: &Tree, message: &Bytes, net: &Net) -> (Log, Vec<TreeBroadcast>) {
    let cfg = BroadcastConfig {
        max_frame_payload: SEG as u32,
        ..BroadcastConfig::new(TransferId(7), SEG)
    };
    let mut nodes: Vec<TreeBroadcast> = (0..tree.node_count() as u32)
        .map(|i| {
            let data = (n(i) == tree.root()).then(|| message.clone());
            TreeBroadcast::new(n(i), tree, data, cfg).unwrap()
        })
        .collect();
    let mut events: BTreeMap<(u64, u64), Event> = BTreeMap::new();
    let mut seq = 0u64;
    let mut free: BTreeMap<(NodeId, NodeId), u64> = BTreeMap::new();
    let mut dead: Vec<NodeId> = Vec::new();
    for &(at, who) in &net.fails {
        seq += 1;
        events.insert((at, seq), Event::Fail(who));
    }
    let mut log = Log::default();
    let mut out = Outputs::new();
    // As the Host does before the Start: the machines pace their sends under a steering host.
    for m in nodes.iter_mut() {
        let mut flat = |_: NodeId, _: NodeId| LinkPrice {
            bytes_per_s: FAST,
            latency_s: 0.0,
            measured: false,
            shares_hosts_path: false,
        };
        m.steer(Time::ZERO, &mut flat, &mut out);
    }
    assert!(out.is_empty());
    let mut inputs: Vec<(u64, NodeId, Input)> =
        nodes.iter().map(|m| (0, m.node(), Input::Start)).collect();
    loop {
        for (now, me, input) in inputs.drain(..) {
            if dead.contains(&me) {
                continue;
            }
            let complete = matches!(input, Input::SendComplete { .. });
            let m = &mut nodes[me.index()];
            m.handle(Time::from_nanos(now), input, &mut out)
                .unwrap_or_else(|e| panic!("node {me} rejected an input: {e}"));
            if complete {
                let mut price = |a: NodeId, b: NodeId| LinkPrice {
                    bytes_per_s: if (a, b) == net.slow {
                        net.believed
                    } else if let Some(e) = net.extra.iter().find(|e| e.link == (a, b)) {
                        e.believed
                    } else {
                        FAST
                    },
                    latency_s: 0.0,
                    measured: true,
                    shares_hosts_path: me == net.slow.0 && net.near.contains(&a) && b == net.slow.1,
                };
                m.steer(Time::from_nanos(now), &mut price, &mut out);
            }
            for o in out.drain() {
                match o {
                    Output::Send(t) => {
                        let len = frame::encoded_len(&t.message) as f64;
                        match &t.message {
                            Message::Broadcast(BroadcastMsg::Data(d)) => {
                                log.data.entry((me, t.to)).or_default().push(d.offset)
                            }
                            Message::Broadcast(BroadcastMsg::Adopt(a)) => {
                                log.adopts.push((me, t.to, a.from_segment))
                            }
                            _ => {}
                        }
                        let f = free.entry((me, t.to)).or_default();
                        let start = (*f).max(now);
                        let end = start + (len * 1e9 / rate(net, me, t.to, start)).ceil() as u64;
                        *f = end;
                        seq += 1;
                        events.insert(
                            (end, seq),
                            Event::Arrive {
                                from: me,
                                to: t.to,
                                message: t.message,
                            },
                        );
                        if let Some(id) = t.notify {
                            seq += 1;
                            events.insert(
                                (end, seq),
                                Event::Complete {
                                    at: me,
                                    to: t.to,
                                    id,
                                },
                            );
                        }
                    }
                    Output::Deliver { offset, data, .. } => {
                        log.delivered.entry(me).or_default().push((offset, data))
                    }
                    Output::Finished => *log.finished.entry(me).or_default() += 1,
                    Output::Aborted(_) => log.aborted.push(me),
                    _ => {}
                }
            }
        }
        let Some(((now, _), ev)) = events.pop_first() else {
            break;
        };
        match ev {
            Event::Arrive { from, to, message } => {
                if !dead.contains(&from) && !dead.contains(&to) {
                    inputs.push((now, to, Input::Message { from, message }));
                }
            }
            Event::Complete { at, to, id } => {
                if !dead.contains(&to) {
                    inputs.push((now, at, Input::SendComplete { to, id }));
                }
            }
            Event::Fail(who) => {
                dead.push(who);
                for m in &nodes {
                    if m.node() != who {
                        inputs.push((now, m.node(), Input::PeerFailed(who)));
                    }
                }
            }
        }
    }
    (log, nodes)
}

fn message(segments: u64) -> Bytes {
    Bytes::from(
        (0..segments * SEG)
            .map(|i| (i.wrapping_mul(31) % 251) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// Every live non-root node got the whole message exactly once, in order.
fn assert_whole(log: &Log, nodes: &[TreeBroadcast], msg: &Bytes, root: NodeId, dead: &[NodeId]) {
    for m in nodes {
        let me = m.node();
        if me == root || dead.contains(&me) {
            continue;
        }
        let got = log.delivered.get(&me).cloned().unwrap_or_default();
        let mut at = 0u64;
        for (offset, data) in &got {
            assert_eq!(*offset, at, "node {me} delivered out of order or twice");
            assert_eq!(&msg[at as usize..at as usize + data.len()], &data[..]);
            at += data.len() as u64;
        }
        assert_eq!(at, msg.len() as u64, "node {me} is missing bytes");
        assert!(m.is_finished(), "node {me} did not finish");
        assert_eq!(log.finished.get(&me), Some(&1));
    }
    assert!(log.aborted.is_empty(), "aborted: {:?}", log.aborted);
}

/// 0 -> {1, 2}, 2 -> 3, 1 -> 4: the link 0 -> 1 runs at 0.5 MB/s from the start where the
/// root measured 100 MB/s before.
fn root_tree() -> Tree {
    Tree::from_edges(
        5,
        n(0),
        &[(n(1), n(0)), (n(2), n(0)), (n(3), n(2)), (n(4), n(1))],
    )
    .unwrap()
}

fn slowed_root_link() -> Net {
    Net {
        slow: (n(0), n(1)),
        extra: vec![],
        believed: FAST,
        fails: vec![],
        near: vec![],
    }
}

#[test]
fn a_child_whose_link_slows_is_handed_to_a_sibling() {
    let msg = message(16);
    let (log, nodes) = run(&root_tree(), &msg, &slowed_root_link());
    assert_whole(&log, &nodes, &msg, n(0), &[]);
    let handoffs = nodes[0].handoffs();
    assert_eq!(handoffs.len(), 1, "{handoffs:?}");
    let (c, s, p) = handoffs[0];
    assert_eq!((c, p), (n(1), n(2)));
    assert!(s > 0 && s < 16, "handed from segment {s}");
    // The slowed link carries no segment >= s; the detour carries exactly those.
    let slow = &log.data[&(n(0), n(1))];
    assert!(slow.iter().all(|&o| o < s * SEG), "{slow:?}");
    assert_eq!(slow.len() as u64, s);
    let detour = &log.data[&(n(2), n(1))];
    assert_eq!(detour, &(s..16).map(|k| k * SEG).collect::<Vec<_>>());
    // The adoption: root to 2, then 2 to 1.
    assert_eq!(log.adopts, vec![(n(0), n(2), s), (n(2), n(1), s)]);
    assert_eq!(nodes[1].parent_of_segment(s), Some(n(2)));
    assert_eq!(nodes[1].parent_of_segment(s - 1), Some(n(0)));
    // 1's own child got everything from 1.
    assert_eq!(log.data[&(n(1), n(4))].len(), 16);
}

#[test]
fn two_links_slowing_at_once_are_both_left_through_a_third_child() {
    // 0 -> {1, 2, 3}, the links to 1 and 2 both slow: a child whose own link is slowed
    // adopts nobody, and an adopter is never handed away itself (its adoptee's segments
    // would then reach it by a path the hand-off did not check, and its new parent's adopt
    // can overtake the root's, which is queued behind data on the slowed link).
    let tree = Tree::from_edges(4, n(0), &[(n(1), n(0)), (n(2), n(0)), (n(3), n(0))]).unwrap();
    let msg = message(32);
    let net = Net {
        extra: vec![Extra {
            link: (n(0), n(2)),
            believed: FAST,
            rates: vec![(0, SLOW)],
        }],
        ..slowed_root_link()
    };
    let (log, nodes) = run(&tree, &msg, &net);
    assert_whole(&log, &nodes, &msg, n(0), &[]);
    let handoffs = nodes[0].handoffs();
    assert_eq!(handoffs.len(), 2, "{handoffs:?}");
    assert!(handoffs.iter().all(|&(_, _, p)| p == n(3)), "{handoffs:?}");
    let mut handed: Vec<NodeId> = handoffs.iter().map(|&(c, _, _)| c).collect();
    handed.sort();
    assert_eq!(handed, vec![n(1), n(2)]);
}

#[test]
fn an_adopter_is_not_handed_away_when_its_own_link_slows_later() {
    // 0 -> {1, 2, 3}, 64 segments: 1's link slows at once and 1 goes to 2 (about a second
    // in); 2's link, measured at 5 MB/s, slows to 0.5 MB/s at 2 s, while the root still
    // sends to it. 2 serves 1 and stays the root's child: no second hand-off.
    let tree = Tree::from_edges(4, n(0), &[(n(1), n(0)), (n(2), n(0)), (n(3), n(0))]).unwrap();
    let msg = message(64);
    let net = Net {
        extra: vec![Extra {
            link: (n(0), n(2)),
            believed: 5e6,
            rates: vec![(0, 5e6), (2_000_000_000, SLOW)],
        }],
        ..slowed_root_link()
    };
    let (log, nodes) = run(&tree, &msg, &net);
    assert_whole(&log, &nodes, &msg, n(0), &[]);
    let handoffs = nodes[0].handoffs();
    assert_eq!(handoffs.len(), 1, "{handoffs:?}");
    assert_eq!((handoffs[0].0, handoffs[0].2), (n(1), n(2)));
    // The root still sent 2 segments after the slowdown (the test exercises it).
    let to_2 = log.data[&(n(0), n(2))].len();
    assert_eq!(to_2, 64);
}

#[test]
fn nothing_changes_when_the_link_runs_as_measured() {
    // The root believes the slow link is as slow as it is: no hand-off, and the root sends
    // every segment to each child, segment by segment.
    let msg = message(16);
    let net = Net {
        believed: SLOW,
        ..slowed_root_link()
    };
    let (log, nodes) = run(&root_tree(), &msg, &net);
    assert_whole(&log, &nodes, &msg, n(0), &[]);
    assert!(nodes[0].handoffs().is_empty());
    assert!(log.adopts.is_empty());
    assert_eq!(log.data[&(n(0), n(1))].len(), 16);
}

#[test]
fn a_sender_with_no_other_child_keeps_the_slow_link() {
    // 0 -> 1 -> {2}: the root's only child is behind the slowed link.
    let tree = Tree::from_edges(3, n(0), &[(n(1), n(0)), (n(2), n(1))]).unwrap();
    let msg = message(16);
    let (log, nodes) = run(&tree, &msg, &slowed_root_link());
    assert_whole(&log, &nodes, &msg, n(0), &[]);
    assert!(nodes[0].handoffs().is_empty());
    assert_eq!(log.data[&(n(0), n(1))].len(), 16);
}

#[test]
fn the_adopter_failing_sends_the_child_back() {
    // 2 adopts 1, then fails after it sent 1 a few segments: 1 re-attaches to the root,
    // which also resumes sending to it; every live node still gets every byte once.
    let msg = message(16);
    let (log, _) = run(&root_tree(), &msg, &slowed_root_link());
    let s = log.adopts[0].2;
    // The handoff happens at about s segments at the slow rate; fail 2 a little later.
    let at = ((s as f64 + 0.5) * SEG as f64 / SLOW * 1e9) as u64;
    let net = Net {
        fails: vec![(at, n(2))],
        ..slowed_root_link()
    };
    let (log, nodes) = run(&root_tree(), &msg, &net);
    assert!(log.data.get(&(n(2), n(1))).is_some_and(|d| !d.is_empty()));
    assert_whole(&log, &nodes, &msg, n(0), &[n(2)]);
    assert!(nodes[0].handoffs().is_empty(), "the hand-off is undone");
    // Earlier: 2 has sent 1 everything from s on, but 1 still waits for segments below s
    // from the root, so it holds 2's frames; 2 fails, 1 re-attaches to the root (dropping
    // what it held of 2's) and the root resumes it from s.
    let at = ((s as f64 - 1.5) * SEG as f64 / SLOW * 1e9) as u64;
    let net = Net {
        fails: vec![(at, n(2))],
        ..slowed_root_link()
    };
    let (log, nodes) = run(&root_tree(), &msg, &net);
    assert_eq!(log.data[&(n(2), n(1))].len() as u64, 16 - s);
    assert!(log.data[&(n(0), n(1))].iter().any(|&o| o >= s * SEG));
    assert_eq!(nodes[1].parent(), Some(n(0)));
    assert_whole(&log, &nodes, &msg, n(0), &[n(2)]);
}

#[test]
fn the_adopter_failing_before_it_told_the_child() {
    // 2 fails right as the root hands 1 to it: the root resumes 1 from s.
    let msg = message(16);
    let (log, _) = run(&root_tree(), &msg, &slowed_root_link());
    let s = log.adopts[0].2;
    // The decision comes at the first completion on the slow link (the window is 2 segments);
    // fail 2 just before anything of 2's reaches 1: at the decision time.
    let overhead = BroadcastMsg::DATA.frame_overhead() as f64;
    let per = ((SEG as f64 + overhead) * 1e9 / SLOW).ceil() as u64;
    let decided = (s - 2) * per;
    let net = Net {
        fails: vec![(decided + 1, n(2))],
        ..slowed_root_link()
    };
    let (log, nodes) = run(&root_tree(), &msg, &net);
    assert_whole(&log, &nodes, &msg, n(0), &[n(2)]);
    assert!(log.adopts.iter().all(|a| a.0 == n(0)), "2 never told 1");
    assert!(!log.data.contains_key(&(n(2), n(1))));
    assert_eq!(
        log.data[&(n(0), n(1))].len(),
        16,
        "the root resumed 1 from s"
    );
}

#[test]
fn the_handed_child_failing_leaves_the_rest_whole() {
    let msg = message(16);
    let (log, _) = run(&root_tree(), &msg, &slowed_root_link());
    let s = log.adopts[0].2;
    let at = ((s as f64 - 1.5) * SEG as f64 / SLOW * 1e9) as u64;
    let net = Net {
        fails: vec![(at, n(1))],
        ..slowed_root_link()
    };
    let (log, nodes) = run(&root_tree(), &msg, &net);
    assert_eq!(log.adopts.len(), 2, "1 was handed to 2 before it failed");
    // 4 (1's child) re-attaches to the root.
    assert_whole(&log, &nodes, &msg, n(0), &[n(1)]);
    assert_eq!(nodes[4].parent(), Some(n(0)));
}

/// 0 -> 5 -> {1, 2}, 2 -> 3, 1 -> 4: the slowed link is 5 -> 1, below the root.
fn relay_tree() -> Tree {
    Tree::from_edges(
        6,
        n(0),
        &[
            (n(5), n(0)),
            (n(1), n(5)),
            (n(2), n(5)),
            (n(3), n(2)),
            (n(4), n(1)),
        ],
    )
    .unwrap()
}

#[test]
fn a_relay_hands_off_and_its_failure_afterwards_leaves_the_rest_whole() {
    let msg = message(16);
    let net = Net {
        slow: (n(5), n(1)),
        extra: vec![],
        believed: FAST,
        fails: vec![],
        near: vec![],
    };
    let (log, nodes) = run(&relay_tree(), &msg, &net);
    assert_whole(&log, &nodes, &msg, n(0), &[]);
    let (c, s, p) = nodes[5].handoffs()[0];
    assert_eq!((c, p), (n(1), n(2)));
    assert!(log.data[&(n(5), n(1))].iter().all(|&o| o < s * SEG));
    // The relay fails after the hand-off, while 1 still waits for segments below s over the
    // slow link: 1 and 2 re-attach to the root.
    let at = ((s as f64 - 1.5) * SEG as f64 / SLOW * 1e9) as u64;
    let net = Net {
        fails: vec![(at.max(1), n(5))],
        ..net
    };
    let (log, nodes) = run(&relay_tree(), &msg, &net);
    assert!(!nodes[5].handoffs().is_empty() || log.adopts.is_empty());
    assert_whole(&log, &nodes, &msg, n(0), &[n(5)]);
    // The relay fails once 1 holds everything below s: 1 keeps its new parent.
    let at = ((s as f64 + 1.5) * SEG as f64 / SLOW * 1e9) as u64;
    let net = Net {
        fails: vec![(at, n(5))],
        ..net
    };
    let (log, nodes) = run(&relay_tree(), &msg, &net);
    assert_whole(&log, &nodes, &msg, n(0), &[n(5)]);
}

#[test]
fn a_sibling_behind_the_same_wan_path_is_no_detour() {
    // 0 -> {1, 2, 3}: 2 is on the root's site, so 2 -> 1 crosses the slowed path as 0 -> 1
    // does; 3 is on another site. The root hands 1 to 3, not to 2 (first in send order).
    let tree = Tree::from_edges(4, n(0), &[(n(1), n(0)), (n(2), n(0)), (n(3), n(0))]).unwrap();
    let msg = message(16);
    let net = Net {
        near: vec![n(2)],
        ..slowed_root_link()
    };
    let (log, nodes) = run(&tree, &msg, &net);
    assert_whole(&log, &nodes, &msg, n(0), &[]);
    let (c, _, p) = nodes[0].handoffs()[0];
    assert_eq!((c, p), (n(1), n(3)));
    // With only the near sibling, nothing is handed over.
    let tree = Tree::from_edges(3, n(0), &[(n(1), n(0)), (n(2), n(0))]).unwrap();
    let (log, nodes) = run(&tree, &msg, &net);
    assert_whole(&log, &nodes, &msg, n(0), &[]);
    assert!(nodes[0].handoffs().is_empty());
}

#[test]
fn a_steered_relay_keeps_a_bounded_tail_of_a_large_message() {
    // 80 MiB through the relay tree, no link slowed: every node gets it whole, and the relay
    // keeps only the last RETAIN_BYTES (and a window) of what it forwarded, not the message.
    let segments = 320;
    let msg = message(segments);
    let net = Net {
        slow: (n(0), n(0)), // no link slowed
        ..slowed_root_link()
    };
    let (log, nodes) = run(&relay_tree(), &msg, &net);
    assert_whole(&log, &nodes, &msg, n(0), &[]);
    let retain = windrose_proto::tree_broadcast::RETAIN_BYTES;
    let window = windrose_proto::tree_broadcast::WINDOW_BYTES.max(2 * SEG);
    for relay in [n(5), n(1), n(2)] {
        let kept = nodes[relay.0 as usize].kept_bytes();
        assert!(kept > 0, "relay {relay} kept nothing for an adoption");
        assert!(
            kept <= retain + window,
            "relay {relay} keeps {kept} bytes of a {} byte message",
            msg.len()
        );
    }
}
