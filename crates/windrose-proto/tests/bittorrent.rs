//! The BitTorrent machine: whole runs through the real wire format on a small timed driver
//! (every node gets every byte and finishes, a tampered piece is fetched again, failures),
//! the choking algorithm (tit-for-tat by download rate, seeds by upload rate, the optimistic
//! unchoke's 3x newcomer weight) and the handling of choke, failure and bad input.

use bytes::Bytes;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use windrose_model::{ClusterId, NodeId};
use windrose_proto::bittorrent::{
    optimistic_unchoke, regular_unchokes, BitTorrent, BitTorrentConfig, ChokeCandidate,
    OPTIMISTIC_TIMER, RECHOKE_TIMER,
};
use windrose_proto::frame::{self, Decoder, TransferId};
use windrose_proto::pieces::{Bitfield, Piece, PieceMsg, PieceRef, Signal, SignalMsg};
use windrose_proto::pieces::{Blake3Verifier, ClusterLayout, Manifest, PieceVerifier, SwarmSetup};
use windrose_proto::{
    node_rng, Input, Message, Output, Outputs, Protocol, ProtocolError, Report, SendId, Time,
    TimerId, Transmit,
};

const T: TransferId = TransferId(42);

fn n(i: u32) -> NodeId {
    NodeId(i)
}

fn random_bytes(len: usize, seed: u64) -> Bytes {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    Bytes::from(v)
}

/// `sizes[c]` nodes in cluster c, numbered consecutively; root 0.
fn setup(sizes: &[usize], data: &Bytes, piece_len: u32) -> SwarmSetup {
    let mut nodes = Vec::new();
    let mut id = 0u32;
    for (c, &s) in sizes.iter().enumerate() {
        for _ in 0..s {
            nodes.push((NodeId(id), ClusterId(c as u32)));
            id += 1;
        }
    }
    SwarmSetup {
        transfer: T,
        root: n(0),
        manifest: Arc::new(Manifest::build(data, piece_len).unwrap()),
        layout: Arc::new(ClusterLayout::new(nodes).unwrap()),
        verifier: Arc::new(Blake3Verifier) as Arc<dyn PieceVerifier>,
        keeper: None,
    }
}

fn machines(s: &SwarmSetup, data: &Bytes, config: &BitTorrentConfig, seed: u64) -> Vec<BitTorrent> {
    s.layout
        .nodes()
        .map(|x| {
            let d = (x == s.root).then(|| data.clone());
            BitTorrent::new(x, s, d, config.clone(), node_rng(seed, x)).unwrap()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// A small timed driver

/// What a run produced.
#[derive(Default, Debug)]
struct RunLog {
    delivered: BTreeMap<NodeId, Vec<u8>>,
    finished: BTreeMap<NodeId, usize>,
    /// (time, from, to, kind, piece) of every frame, in send order.
    frames: Vec<(u64, NodeId, NodeId, &'static str, Option<u32>)>,
    progress_done: BTreeMap<NodeId, u64>,
    end_ns: u64,
}

type Tamper<'a> = &'a mut dyn FnMut(NodeId, &mut Transmit);

/// Runs the machines: every message goes through the wire format and arrives after 1 ms plus
/// its length at 100 MB/s (FIFO per connection); timers fire at their time. `fail` declares
/// nodes failed at given times (they get no more inputs; every other node is told).
fn run(
    nodes: &mut [BitTorrent],
    tamper: Tamper<'_>,
    fail: &[(NodeId, u64)],
    max_ns: u64,
) -> RunLog {
    let index: BTreeMap<NodeId, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, m)| (m.node(), i))
        .collect();
    let mut queue: BTreeMap<(u64, u64), (NodeId, Input, u64)> = BTreeMap::new();
    let mut seq = 0u64;
    let mut push = |q: &mut BTreeMap<(u64, u64), (NodeId, Input, u64)>, t: u64, to, inp, gen| {
        seq += 1;
        q.insert((t, seq), (to, inp, gen));
    };
    for m in nodes.iter() {
        push(&mut queue, 0, m.node(), Input::Start, 0);
    }
    for &(x, t) in fail {
        for m in nodes.iter() {
            if m.node() != x {
                push(&mut queue, t, m.node(), Input::PeerFailed(x), 0);
            }
        }
    }
    let failed_at: BTreeMap<NodeId, u64> = fail.iter().copied().collect();
    let mut timers: BTreeMap<(NodeId, TimerId), u64> = BTreeMap::new();
    let mut last_arrival: BTreeMap<(NodeId, NodeId), u64> = BTreeMap::new();
    let mut decoders: BTreeMap<(NodeId, NodeId), Decoder> = BTreeMap::new();
    let mut log = RunLog::default();
    let mut out = Outputs::new();
    while let Some(((now, _), (me, input, gen))) = queue.pop_first() {
        assert!(now <= max_ns, "the run does not end by {max_ns} ns");
        if failed_at.get(&me).is_some_and(|&t| t <= now) {
            continue;
        }
        if let Input::Timer(id) = input {
            if timers.get(&(me, id)) != Some(&gen) {
                continue;
            }
        }
        log.end_ns = now;
        nodes[index[&me]]
            .handle(Time::from_nanos(now), input, &mut out)
            .unwrap_or_else(|e| panic!("node {me} rejected an input: {e}"));
        for output in out.drain() {
            match output {
                Output::Send(mut t) => {
                    tamper(me, &mut t);
                    let bytes = frame::encode(&t.message).unwrap();
                    let dec = decoders.entry((me, t.to)).or_default();
                    dec.push(&bytes);
                    let message = dec.next_message().unwrap().expect("a whole frame");
                    let piece = match &message {
                        Message::Pieces(PieceMsg::Piece(p)) => Some(p.piece),
                        Message::Pieces(PieceMsg::Request(r))
                        | Message::Pieces(PieceMsg::Have(r)) => Some(r.piece),
                        _ => None,
                    };
                    let name = match &message {
                        Message::Pieces(PieceMsg::Signal(s)) => match s.signal {
                            Signal::Hello => "hello",
                            Signal::Interested => "interested",
                            Signal::NotInterested => "not_interested",
                            Signal::Choke => "choke",
                            Signal::Unchoke => "unchoke",
                            Signal::Announce => "announce",
                            Signal::Complete => "complete",
                            Signal::AllComplete => "all_complete",
                            Signal::Rejoin => "rejoin",
                        },
                        m => m.kind().name(),
                    };
                    log.frames.push((now, me, t.to, name, piece));
                    let last = last_arrival.entry((me, t.to)).or_default();
                    let at = (now + 1_000_000 + bytes.len() as u64 * 10).max(*last);
                    *last = at;
                    push(
                        &mut queue,
                        at,
                        t.to,
                        Input::Message { from: me, message },
                        0,
                    );
                    if let Some(id) = t.notify {
                        push(&mut queue, at, me, Input::SendComplete { to: t.to, id }, 0);
                    }
                }
                Output::SetTimer { timer, at } => {
                    let g = timers.entry((me, timer)).or_default();
                    *g += 1;
                    let g = *g;
                    push(
                        &mut queue,
                        at.as_nanos().max(now),
                        me,
                        Input::Timer(timer),
                        g,
                    );
                }
                Output::CancelTimer(timer) => {
                    *timers.entry((me, timer)).or_default() += 1;
                }
                Output::Deliver { offset, data, .. } => {
                    let d = log.delivered.entry(me).or_default();
                    assert_eq!(offset, d.len() as u64, "node {me} delivers out of order");
                    d.extend_from_slice(&data);
                }
                Output::Report(Report::Progress { done_bytes, .. }) => {
                    log.progress_done.insert(me, done_bytes);
                }
                Output::Report(_) => {}
                Output::Finished => *log.finished.entry(me).or_default() += 1,
                Output::Compute(_) => panic!("no compute in BitTorrent"),
                Output::Aborted(r) => panic!("node {me} aborted: {r}"),
            }
        }
    }
    log
}

fn no_tamper() -> impl FnMut(NodeId, &mut Transmit) {
    |_, _| {}
}

fn assert_complete(log: &RunLog, s: &SwarmSetup, data: &Bytes, skip: &[NodeId]) {
    for x in s.layout.nodes().filter(|x| !skip.contains(x)) {
        assert_eq!(
            log.finished.get(&x),
            Some(&1),
            "node {x} did not finish once"
        );
        assert_eq!(
            log.progress_done.get(&x),
            Some(&(data.len() as u64)),
            "node {x}"
        );
        if x != s.root {
            assert_eq!(
                log.delivered.get(&x).map(Vec::as_slice).unwrap_or(&[]),
                &data[..],
                "node {x} got the wrong bytes"
            );
        }
    }
}

#[test]
fn every_node_gets_every_byte_and_finishes() {
    for (sizes, len, piece, seed) in [
        (vec![1], 1000, 100, 1),
        (vec![2], 0, 100, 2),
        (vec![3, 2], 5000, 333, 3),
        (vec![8, 8, 8, 8], 40_000, 1024, 4),
        (vec![1, 5, 3], 777, 1000, 5),
    ] {
        let data = random_bytes(len, seed);
        let s = setup(&sizes, &data, piece);
        let mut m = machines(&s, &data, &BitTorrentConfig::default(), seed);
        let log = run(&mut m, &mut no_tamper(), &[], 3_600_000_000_000);
        assert_complete(&log, &s, &data, &[]);
        assert!(m.iter().all(|x| x.is_finished()));
    }
}

#[test]
fn redundant_haves_go_to_every_peer_and_change_nothing_else() {
    let data = random_bytes(30_000, 12);
    let s = setup(&[4, 3], &data, 1000);
    let count = |redundant: bool| {
        let config = BitTorrentConfig {
            redundant_haves: redundant,
            ..BitTorrentConfig::default()
        };
        let mut m = machines(&s, &data, &config, 12);
        let log = run(&mut m, &mut no_tamper(), &[], 3_600_000_000_000);
        assert_complete(&log, &s, &data, &[]);
        let haves = log.frames.iter().filter(|f| f.3 == "have").count();
        (haves, log.frames.len())
    };
    let (lean, _) = count(false);
    let (full, _) = count(true);
    // With every have: each of the 6 receivers announces each of the 30 pieces to each of its
    // peers (all 6 others: the lists of 50 name everybody).
    assert!(full > lean, "{full} vs {lean}");
    assert!(full >= 6 * 30 * 5, "{full}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn random_swarms_complete(
        sizes in proptest::collection::vec(1usize..6, 1..4),
        len in 0usize..20_000,
        piece in 1u32..4000,
        list in 1usize..8,
        slots in 1usize..5,
        r in 1usize..6,
        seed in any::<u64>(),
    ) {
        let data = random_bytes(len, seed);
        let s = setup(&sizes, &data, piece);
        let config = BitTorrentConfig {
            peer_list_len: list,
            unchoke_slots: slots,
            outstanding: r,
            ..BitTorrentConfig::default()
        };
        let mut m = machines(&s, &data, &config, seed);
        let log = run(&mut m, &mut no_tamper(), &[], 36_000_000_000_000);
        assert_complete(&log, &s, &data, &[]);
    }
}

#[test]
fn a_tampered_piece_is_rejected_and_fetched_again() {
    let data = random_bytes(20_000, 7);
    let s = setup(&[4], &data, 1000);
    let mut m = machines(&s, &data, &BitTorrentConfig::default(), 7);
    // The first copy of piece 3 that reaches node 2 from a node other than the root has a
    // flipped byte.
    let mut done = false;
    let mut sender = None;
    let mut tamper = |me: NodeId, t: &mut Transmit| {
        if let Message::Pieces(PieceMsg::Piece(p)) = &mut t.message {
            if t.to == n(2) && p.piece == 3 && !done && me != n(0) {
                done = true;
                sender = Some(me);
                let mut v = p.payload.to_vec();
                v[10] ^= 0xFF;
                p.payload = Bytes::from(v);
            }
        }
    };
    let log = run(&mut m, &mut tamper, &[], 3_600_000_000_000);
    assert!(done, "the tampered piece was sent");
    assert_complete(&log, &s, &data, &[]);
    let to_2 = |kind: &str| {
        log.frames
            .iter()
            .filter(|f| f.2 == n(2) && f.3 == kind && f.4 == Some(3))
            .count()
    };
    assert!(to_2("piece") >= 2, "piece 3 was not sent to node 2 again");
    // Its sender is dropped: no longer a peer of node 2, never asked for anything after the
    // bad copy.
    let sender = sender.unwrap();
    assert!(
        m[2].peers().all(|p| p != sender),
        "{sender} is still a peer"
    );
    let bad_at = log
        .frames
        .iter()
        .find(|f| f.1 == sender && f.2 == n(2) && f.3 == "piece" && f.4 == Some(3))
        .unwrap()
        .0;
    assert!(log
        .frames
        .iter()
        .all(|f| !(f.0 > bad_at && f.1 == n(2) && f.2 == sender && f.3 == "request")));
    // Node 2 announced piece 3 to each peer exactly once, after the good copy.
    let haves: Vec<_> = log
        .frames
        .iter()
        .filter(|f| f.1 == n(2) && f.3 == "have" && f.4 == Some(3))
        .collect();
    let peers: BTreeSet<NodeId> = haves.iter().map(|f| f.2).collect();
    assert_eq!(haves.len(), peers.len());
    let first_piece = log
        .frames
        .iter()
        .find(|f| f.2 == n(2) && f.3 == "piece" && f.4 == Some(3))
        .unwrap()
        .0;
    assert!(haves.iter().all(|f| f.0 > first_piece));
}

#[test]
fn a_failed_node_does_not_stop_the_run() {
    let data = random_bytes(60_000, 9);
    let s = setup(&[4, 4], &data, 1000);
    let mut m = machines(&s, &data, &BitTorrentConfig::default(), 9);
    // Node 5 fails after a few pieces have moved.
    let log = run(
        &mut m,
        &mut no_tamper(),
        &[(n(5), 5_000_000)],
        3_600_000_000_000,
    );
    assert_complete(&log, &s, &data, &[n(5)]);
}

#[test]
fn nodes_finish_when_the_tracker_fails() {
    let data = random_bytes(30_000, 11);
    let s = setup(&[3, 3], &data, 1000);
    let mut m = machines(&s, &data, &BitTorrentConfig::default(), 11);
    // The tracker never hears that node 4 is complete (its Complete becomes a harmless Hello),
    // so the run cannot end normally; the root then fails at 100 s.
    let mut tamper = |from: NodeId, t: &mut Transmit| {
        if let Message::Pieces(PieceMsg::Signal(s)) = &mut t.message {
            if from == n(4) && s.signal == Signal::Complete {
                s.signal = Signal::Hello;
            }
        }
    };
    let log = run(
        &mut m,
        &mut tamper,
        &[(n(0), 100_000_000_000)],
        3_600_000_000_000,
    );
    for x in 1..6 {
        assert_eq!(log.finished.get(&n(x)), Some(&1), "node {x}");
        assert_eq!(log.delivered[&n(x)], &data[..]);
    }
    assert!(!m[0].is_finished(), "the tracker cannot have ended the run");
    assert!(log.end_ns >= 100_000_000_000);
}

// ---------------------------------------------------------------------------------------------
// The choking algorithm

fn cand(peer: u32, downloaded: u64, uploaded: u64, interested: bool) -> ChokeCandidate {
    ChokeCandidate {
        peer: n(peer),
        downloaded,
        uploaded,
        interested,
        newcomer: false,
    }
}

#[test]
fn tit_for_tat_unchokes_the_four_best_interested_by_download_rate() {
    let c = [
        cand(1, 500, 9000, true),
        cand(2, 100, 8000, true),
        cand(3, 900, 0, true),
        cand(4, 9999, 0, false), // best rate but not interested
        cand(5, 300, 7000, true),
        cand(6, 700, 1, true),
        cand(7, 50, 6000, true),
    ];
    for seed in 0..20 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let got = regular_unchokes(&c, false, 4, &mut rng);
        assert_eq!(got, vec![n(3), n(6), n(1), n(5)]);
        // A seed ranks by upload rate.
        let got = regular_unchokes(&c, true, 4, &mut rng);
        assert_eq!(got, vec![n(1), n(2), n(5), n(7)]);
    }
    // Fewer interested peers than slots: all of them.
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let got: BTreeSet<_> = regular_unchokes(&c[..4], false, 4, &mut rng)
        .into_iter()
        .collect();
    assert_eq!(got, BTreeSet::from([n(1), n(2), n(3)]));
}

#[test]
fn equal_rates_are_broken_at_random() {
    let c: Vec<_> = (0..10).map(|i| cand(i, 0, 0, true)).collect();
    let mut seen = BTreeSet::new();
    for seed in 0..50 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        seen.extend(regular_unchokes(&c, false, 4, &mut rng));
    }
    assert_eq!(seen.len(), 10, "every peer gets its turn: {seen:?}");
}

#[test]
fn optimistic_unchoke_favours_newcomers_three_to_one() {
    // 5 newcomers and 5 old peers, all interested, plus excluded and uninterested ones.
    let mut c: Vec<_> = (0..10)
        .map(|i| ChokeCandidate {
            newcomer: i < 5,
            ..cand(i, 0, 0, true)
        })
        .collect();
    c.push(cand(10, 0, 0, false));
    c.push(ChokeCandidate {
        newcomer: true,
        ..cand(11, 0, 0, true)
    });
    let exclude = [n(11)];
    let mut rng = ChaCha8Rng::seed_from_u64(2026);
    let draws = 40_000;
    let mut per = [0u32; 12];
    for _ in 0..draws {
        let p = optimistic_unchoke(&c, &exclude, 3, &mut rng).unwrap();
        per[p.index()] += 1;
    }
    assert_eq!(per[10] + per[11], 0, "uninterested or excluded peer picked");
    let newcomers: u32 = per[..5].iter().sum();
    let old: u32 = per[5..10].iter().sum();
    // Expected 3/4 newcomers (30 000 of 40 000, sd about 87): a 10 sd band.
    assert!(
        (29_100..=30_900).contains(&newcomers),
        "{newcomers} newcomers"
    );
    assert_eq!(newcomers + old, draws);
    let ratio = f64::from(newcomers) / 5.0 / (f64::from(old) / 5.0);
    assert!((2.7..3.3).contains(&ratio), "ratio {ratio}");
    // With weight 1 it is uniform.
    let mut per = [0u32; 12];
    for _ in 0..draws {
        per[optimistic_unchoke(&c, &exclude, 1, &mut rng)
            .unwrap()
            .index()] += 1;
    }
    let newcomers: u32 = per[..5].iter().sum();
    assert!((19_000..=21_000).contains(&newcomers), "{newcomers}");
    assert_eq!(optimistic_unchoke(&c[10..11], &[], 3, &mut rng), None);
}

// ---------------------------------------------------------------------------------------------
// One machine, driven by hand

fn sig(signal: Signal) -> Message {
    Message::Pieces(PieceMsg::Signal(SignalMsg {
        transfer: T,
        signal,
        arg: 0,
    }))
}

fn msg(from: u32, message: Message) -> Input {
    Input::Message {
        from: n(from),
        message,
    }
}

fn sends(out: &mut Outputs) -> Vec<(NodeId, Message)> {
    out.drain()
        .filter_map(|o| match o {
            Output::Send(t) => Some((t.to, t.message)),
            _ => None,
        })
        .collect()
}

fn signals_to(s: &[(NodeId, Message)], signal: Signal) -> BTreeSet<NodeId> {
    s.iter()
        .filter(|(_, m)| matches!(m, Message::Pieces(PieceMsg::Signal(x)) if x.signal == signal))
        .map(|(to, _)| *to)
        .collect()
}

fn requests_to(s: &[(NodeId, Message)], to: NodeId) -> Vec<u32> {
    s.iter()
        .filter_map(|(t, m)| match m {
            Message::Pieces(PieceMsg::Request(r)) if *t == to => Some(r.piece),
            _ => None,
        })
        .collect()
}

/// Node 1 of a 10-node swarm (data of 400 pieces of 100 bytes), started, with peers 2..=9
/// connected (each said Hello).
fn node1() -> (BitTorrent, SwarmSetup, Bytes, Outputs) {
    let data = random_bytes(40_000, 3);
    let s = setup(&[10], &data, 100);
    let mut m = BitTorrent::new(
        n(1),
        &s,
        None,
        BitTorrentConfig::default(),
        node_rng(5, n(1)),
    )
    .unwrap();
    let mut out = Outputs::new();
    m.handle(Time::ZERO, Input::Start, &mut out).unwrap();
    let s0 = sends(&mut out);
    assert_eq!(signals_to(&s0, Signal::Announce), BTreeSet::from([n(0)]));
    for p in 2..10 {
        m.handle(Time::ZERO, msg(p, sig(Signal::Hello)), &mut out)
            .unwrap();
    }
    assert!(sends(&mut out).is_empty(), "nothing to say yet");
    (m, s, data, out)
}

fn piece_msg(s: &SwarmSetup, data: &Bytes, i: u32) -> Message {
    Message::Pieces(PieceMsg::Piece(Piece {
        transfer: T,
        piece: i,
        payload: s.manifest.slice(data, i),
    }))
}

#[test]
fn the_rechoke_unchokes_the_best_uploaders_and_one_optimistic_peer() {
    let (mut m, s, data, mut out) = node1();
    // Every peer is interested in node 1; peer p sends node 1 (p - 2) pieces (unsolicited
    // pieces count for the rate as any other): peers 9, 8, 7, 6 are the best.
    let mut next = 0;
    let t = Time::from_secs_f64(1.0);
    for p in 2..10 {
        m.handle(t, msg(p, sig(Signal::Interested)), &mut out)
            .unwrap();
        for _ in 0..p - 2 {
            m.handle(t, msg(p, piece_msg(&s, &data, next)), &mut out)
                .unwrap();
            next += 1;
        }
    }
    out.clear();
    m.handle(
        Time::from_secs_f64(10.0),
        Input::Timer(RECHOKE_TIMER),
        &mut out,
    )
    .unwrap();
    let all: Vec<Output> = out.drain().collect();
    assert!(all.iter().any(|o| matches!(
        o,
        Output::SetTimer { timer, at } if *timer == RECHOKE_TIMER && *at == Time::from_secs_f64(20.0)
    )));
    let unchoked: BTreeSet<NodeId> = m.unchoked().into_iter().collect();
    assert_eq!(
        unchoked.len(),
        5,
        "four by rate and one optimistic: {unchoked:?}"
    );
    for best in [6, 7, 8, 9] {
        assert!(unchoked.contains(&n(best)), "{unchoked:?}");
    }
    // The optimistic rotation picks another peer among the rest, keeping the four best.
    let mut optimistic = BTreeSet::new();
    for k in 0..30 {
        m.handle(
            Time::from_secs_f64(11.0 + f64::from(k) * 0.01),
            Input::Timer(OPTIMISTIC_TIMER),
            &mut out,
        )
        .unwrap();
        out.clear();
        let u: BTreeSet<NodeId> = m.unchoked().into_iter().collect();
        assert_eq!(u.len(), 5);
        let extra: Vec<NodeId> = u.iter().copied().filter(|x| x.0 < 6).collect();
        assert_eq!(extra.len(), 1, "{u:?}");
        optimistic.insert(extra[0]);
    }
    assert_eq!(
        optimistic.len(),
        4,
        "every other peer gets the optimistic slot"
    );
}

#[test]
fn choke_and_failure_release_outstanding_requests() {
    let (mut m, s, data, mut out) = node1();
    let all = Message::Pieces(PieceMsg::Bitfield(Bitfield::from_fn(T, 400, |_| true)));
    for p in [2, 3, 4] {
        m.handle(Time::ZERO, msg(p, all.clone()), &mut out).unwrap();
    }
    let s1 = sends(&mut out);
    assert_eq!(
        signals_to(&s1, Signal::Interested),
        BTreeSet::from([n(2), n(3), n(4)])
    );
    m.handle(Time::ZERO, msg(2, sig(Signal::Unchoke)), &mut out)
        .unwrap();
    let first = requests_to(&sends(&mut out), n(2));
    assert_eq!(first.len(), 5, "R = 5 requests outstanding");
    // One arrives: one more request.
    m.handle(Time::ZERO, msg(2, piece_msg(&s, &data, first[0])), &mut out)
        .unwrap();
    let s2 = sends(&mut out);
    let more = requests_to(&s2, n(2));
    assert_eq!(more.len(), 1);
    let haves: BTreeSet<NodeId> = s2
        .iter()
        .filter(|(_, m)| matches!(m, Message::Pieces(PieceMsg::Have(_))))
        .map(|(to, _)| *to)
        .collect();
    assert_eq!(
        haves,
        (5..10).map(n).collect(),
        "have to every peer not known to hold the piece"
    );
    let mut pending: BTreeSet<u32> = first[1..].iter().chain(&more).copied().collect();
    // Node 2 chokes: the pieces outstanding there must be requested again elsewhere (among
    // all the others: the choice is random).
    m.handle(Time::ZERO, msg(2, sig(Signal::Choke)), &mut out)
        .unwrap();
    assert!(sends(&mut out).is_empty());
    m.handle(Time::ZERO, msg(3, sig(Signal::Unchoke)), &mut out)
        .unwrap();
    let at3 = requests_to(&sends(&mut out), n(3));
    assert_eq!(at3.len(), 5);
    // Serve node 3's requests until every piece pending at node 2 came back from node 3.
    let mut asked: Vec<u32> = at3;
    let mut got = BTreeSet::from([first[0]]);
    while let Some(i) = asked.pop() {
        m.handle(Time::ZERO, msg(3, piece_msg(&s, &data, i)), &mut out)
            .unwrap();
        got.insert(i);
        pending.remove(&i);
        asked.extend(requests_to(&sends(&mut out), n(3)));
        if pending.is_empty() {
            break;
        }
    }
    assert!(
        pending.is_empty(),
        "released pieces never re-requested: {pending:?}"
    );
    assert!(
        !m.store().is_complete(),
        "pick another seed: the test needs pieces left"
    );
    // Node 4 unchokes, then fails: its requests go to node 3.
    m.handle(Time::ZERO, msg(4, sig(Signal::Unchoke)), &mut out)
        .unwrap();
    let at4: BTreeSet<u32> = requests_to(&sends(&mut out), n(4)).into_iter().collect();
    assert_eq!(at4.len(), 5);
    m.handle(Time::ZERO, Input::PeerFailed(n(4)), &mut out)
        .unwrap();
    let mut seen = BTreeSet::new();
    while let Some(i) = asked.pop() {
        m.handle(Time::ZERO, msg(3, piece_msg(&s, &data, i)), &mut out)
            .unwrap();
        seen.insert(i);
        asked.extend(requests_to(&sends(&mut out), n(3)));
    }
    assert!(
        at4.is_subset(&seen),
        "pieces of the failed peer not fetched elsewhere"
    );
    assert!(m.store().is_complete());
    // Complete: it tells the tracker and keeps serving until AllComplete.
    assert!(!m.is_finished());
    m.handle(Time::ZERO, msg(5, sig(Signal::Interested)), &mut out)
        .unwrap();
    m.handle(
        Time::ZERO,
        msg(
            5,
            Message::Pieces(PieceMsg::Request(PieceRef {
                transfer: T,
                piece: 7,
            })),
        ),
        &mut out,
    )
    .unwrap();
    let served: Vec<_> = out
        .drain()
        .filter_map(|o| match o {
            Output::Send(t) if t.to == n(5) => Some(t),
            _ => None,
        })
        .collect();
    assert!(served
        .iter()
        .any(|t| matches!(&t.message, Message::Pieces(PieceMsg::Piece(p)) if p.piece == 7)));
    let id = served.iter().find_map(|t| t.notify).unwrap();
    m.handle(Time::ZERO, Input::SendComplete { to: n(5), id }, &mut out)
        .unwrap();
    m.handle(Time::ZERO, msg(0, sig(Signal::AllComplete)), &mut out)
        .unwrap();
    assert!(m.is_finished());
    assert!(out.as_slice().contains(&Output::Finished));
    // Late messages are ignored.
    out.clear();
    m.handle(Time::ZERO, msg(3, sig(Signal::Choke)), &mut out)
        .unwrap();
    m.handle(Time::ZERO, Input::Timer(RECHOKE_TIMER), &mut out)
        .unwrap();
    assert!(out.is_empty());
}

#[test]
fn requests_to_a_silent_peer_are_released_after_the_timeout() {
    let (mut m, s, data, mut out) = node1();
    let all = Message::Pieces(PieceMsg::Bitfield(Bitfield::from_fn(T, 400, |_| true)));
    for p in [2, 3] {
        m.handle(Time::ZERO, msg(p, all.clone()), &mut out).unwrap();
    }
    m.handle(Time::ZERO, msg(2, sig(Signal::Unchoke)), &mut out)
        .unwrap();
    let at2: BTreeSet<u32> = requests_to(&sends(&mut out), n(2)).into_iter().collect();
    assert_eq!(at2.len(), 5);
    // Node 2 never answers. Before the timeout the rechoke leaves its requests alone.
    m.handle(
        Time::from_secs_f64(50.0),
        Input::Timer(RECHOKE_TIMER),
        &mut out,
    )
    .unwrap();
    assert!(requests_to(&sends(&mut out), n(2)).is_empty());
    // Node 3 unchokes; it gets 5 requests of its own, none of node 2's pieces.
    m.handle(
        Time::from_secs_f64(55.0),
        msg(3, sig(Signal::Unchoke)),
        &mut out,
    )
    .unwrap();
    let at3: BTreeSet<u32> = requests_to(&sends(&mut out), n(3)).into_iter().collect();
    assert_eq!(at3.len(), 5);
    assert!(at3.is_disjoint(&at2));
    // At 60 s node 2's requests are released: node 1 asks again (node 3 has its 5 requests
    // outstanding but owes for only 5 s, so only node 2 gets new requests).
    m.handle(
        Time::from_secs_f64(60.0),
        Input::Timer(RECHOKE_TIMER),
        &mut out,
    )
    .unwrap();
    let s1 = sends(&mut out);
    assert_eq!(requests_to(&s1, n(2)).len(), 5);
    assert!(requests_to(&s1, n(3)).is_empty());
    // Node 2 chokes (releasing its second batch); node 3 alone serves everything: node 1
    // completes, so node 2's first batch was released too.
    m.handle(
        Time::from_secs_f64(61.0),
        msg(2, sig(Signal::Choke)),
        &mut out,
    )
    .unwrap();
    let mut asked: Vec<u32> = at3.into_iter().collect();
    asked.extend(requests_to(&sends(&mut out), n(3)));
    while let Some(i) = asked.pop() {
        m.handle(
            Time::from_secs_f64(62.0),
            msg(3, piece_msg(&s, &data, i)),
            &mut out,
        )
        .unwrap();
        asked.extend(requests_to(&sends(&mut out), n(3)));
    }
    assert!(m.store().is_complete());
}

#[test]
fn pieces_are_chosen_at_random_among_what_the_peer_has_not_rarest_first() {
    let data = random_bytes(40_000, 3);
    let s = setup(&[10], &data, 100);
    let mut common = 0u32;
    let mut total = 0u32;
    let mut distinct = BTreeSet::new();
    for seed in 0..400 {
        let mut m = BitTorrent::new(
            n(1),
            &s,
            None,
            BitTorrentConfig::default(),
            node_rng(seed, n(1)),
        )
        .unwrap();
        let mut out = Outputs::new();
        m.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        for p in 2..10 {
            m.handle(Time::ZERO, msg(p, sig(Signal::Hello)), &mut out)
                .unwrap();
        }
        // Peer 2 has the even pieces; peers 3..=9 also have the even pieces below 200, so
        // those are common and the even pieces from 200 on are rare.
        let even = Message::Pieces(PieceMsg::Bitfield(Bitfield::from_fn(T, 400, |i| {
            i % 2 == 0
        })));
        m.handle(Time::ZERO, msg(2, even), &mut out).unwrap();
        for p in 3..10 {
            let low = Message::Pieces(PieceMsg::Bitfield(Bitfield::from_fn(T, 400, |i| {
                i % 2 == 0 && i < 200
            })));
            m.handle(Time::ZERO, msg(p, low), &mut out).unwrap();
        }
        out.clear();
        m.handle(Time::ZERO, msg(2, sig(Signal::Unchoke)), &mut out)
            .unwrap();
        let r = requests_to(&sends(&mut out), n(2));
        assert_eq!(r.len(), 5);
        assert_eq!(
            r.iter().collect::<BTreeSet<_>>().len(),
            5,
            "a piece asked twice"
        );
        for &i in &r {
            assert_eq!(i % 2, 0, "peer 2 does not have piece {i}");
            common += u32::from(i < 200);
            total += 1;
            distinct.insert(i);
        }
    }
    // Rarest-first would take only rare pieces; random takes both halves alike (expected
    // 1000 of 2000, sd about 22: a 9 sd band).
    assert!((800..=1200).contains(&common), "{common} of {total} common");
    assert!(
        distinct.len() > 180,
        "only {} distinct pieces",
        distinct.len()
    );
}

#[test]
fn bad_input_is_rejected_without_effect() {
    let (mut m, _s, _data, mut out) = node1();
    let wrong = Message::Pieces(PieceMsg::Have(PieceRef {
        transfer: TransferId(7),
        piece: 0,
    }));
    assert!(matches!(
        m.handle(Time::ZERO, msg(2, wrong), &mut out),
        Err(ProtocolError::WrongTransfer { .. })
    ));
    let far = Message::Pieces(PieceMsg::Have(PieceRef {
        transfer: T,
        piece: 400,
    }));
    assert!(matches!(
        m.handle(Time::ZERO, msg(2, far), &mut out),
        Err(ProtocolError::Inconsistent { .. })
    ));
    let short = Message::Pieces(PieceMsg::Bitfield(Bitfield::from_fn(T, 399, |_| true)));
    assert!(matches!(
        m.handle(Time::ZERO, msg(2, short), &mut out),
        Err(ProtocolError::Inconsistent { .. })
    ));
    // Only the tracker takes announces; only the tracker ends the run; not while incomplete.
    assert!(m
        .handle(Time::ZERO, msg(2, sig(Signal::Announce)), &mut out)
        .is_err());
    assert!(m
        .handle(Time::ZERO, msg(2, sig(Signal::AllComplete)), &mut out)
        .is_err());
    assert!(m
        .handle(Time::ZERO, msg(0, sig(Signal::AllComplete)), &mut out)
        .is_err());
    assert!(matches!(
        m.handle(
            Time::ZERO,
            Input::SendComplete {
                to: n(2),
                id: SendId(0)
            },
            &mut out
        ),
        Err(ProtocolError::UnknownSend { .. })
    ));
    assert!(out.is_empty());
    assert!(!m.is_finished());
}

#[test]
fn setup_errors() {
    let data = random_bytes(1000, 1);
    let s = setup(&[3], &data, 100);
    let rng = || node_rng(1, n(0));
    assert!(BitTorrent::new(n(0), &s, None, BitTorrentConfig::default(), rng()).is_err());
    assert!(BitTorrent::new(
        n(1),
        &s,
        Some(data.clone()),
        BitTorrentConfig::default(),
        rng()
    )
    .is_err());
    assert!(BitTorrent::new(n(9), &s, None, BitTorrentConfig::default(), rng()).is_err());
    for bad in [
        BitTorrentConfig {
            outstanding: 0,
            ..Default::default()
        },
        BitTorrentConfig {
            rechoke_s: 0.0,
            ..Default::default()
        },
        BitTorrentConfig {
            optimistic_s: f64::NAN,
            ..Default::default()
        },
    ] {
        assert!(BitTorrent::new(n(1), &s, None, bad, rng()).is_err());
    }
    let d = BitTorrentConfig::default();
    assert_eq!(
        (
            d.peer_list_len,
            d.unchoke_slots,
            d.outstanding,
            d.newcomer_weight
        ),
        (50, 4, 5, 3)
    );
    assert_eq!((d.rechoke_s, d.optimistic_s), (10.0, 30.0));
}

/// Bad copies of one piece are counted from any senders (peers, dropped at their first, and
/// the root, never dropped): after `MAX_BAD_COPIES` of them the next one aborts the node,
/// naming the piece, instead of asking the root again for ever (a root whose file changed
/// during the run sends the same bad bytes every time).
#[test]
fn a_piece_that_keeps_failing_verification_aborts_the_node() {
    use windrose_proto::pieces::MAX_BAD_COPIES;
    let (mut m, s, data, mut out) = node1();
    let bad = || {
        let mut v = s.manifest.slice(&data, 7).to_vec();
        v[0] ^= 0xFF;
        Message::Pieces(PieceMsg::Piece(Piece {
            transfer: T,
            piece: 7,
            payload: Bytes::from(v),
        }))
    };
    let senders: Vec<u32> = [2, 3]
        .into_iter()
        .chain(std::iter::repeat(0))
        .take(MAX_BAD_COPIES as usize + 1)
        .collect();
    let t = Time::from_secs_f64(1.0);
    for (k, &from) in senders.iter().enumerate() {
        out.clear();
        m.handle(t, msg(from, bad()), &mut out).unwrap();
        let aborted: Vec<_> = out
            .as_slice()
            .iter()
            .filter_map(|o| match o {
                Output::Aborted(r) => Some(*r),
                _ => None,
            })
            .collect();
        if k < MAX_BAD_COPIES as usize {
            assert!(aborted.is_empty(), "aborted after {} bad copies", k + 1);
            assert_eq!(m.status(), windrose_proto::Status::Running);
        } else {
            assert_eq!(
                aborted,
                vec![windrose_proto::AbortReason::BadPiece {
                    piece: 7,
                    copies: MAX_BAD_COPIES + 1
                }]
            );
        }
    }
    assert_eq!(m.status(), windrose_proto::Status::Aborted);
    assert!(!m.store().has(7));
    // Nothing more is taken in: a good copy now changes nothing.
    out.clear();
    m.handle(t, msg(0, piece_msg(&s, &data, 7)), &mut out)
        .unwrap();
    assert!(!m.store().has(7));
}

/// Issue 21, defect 2: a root whose data changed after its manifest was made checks a piece
/// before it first sends it and calls the run off naming the piece, rather than serve bytes
/// every receiver would refuse.
#[test]
fn a_root_whose_data_changed_calls_the_run_off_before_sending_it() {
    let data = random_bytes(40_000, 3);
    let s = setup(&[10], &data, 100);
    let mut changed = data.to_vec();
    changed[7 * 100 + 3] ^= 0x80;
    let mut root = BitTorrent::new(
        n(0),
        &s,
        Some(Bytes::from(changed)),
        BitTorrentConfig::default(),
        node_rng(5, n(0)),
    )
    .unwrap();
    let mut out = Outputs::new();
    root.handle(Time::ZERO, Input::Start, &mut out).unwrap();
    for p in 1..10 {
        root.handle(Time::ZERO, msg(p, sig(Signal::Hello)), &mut out)
            .unwrap();
    }
    out.clear();
    let request = Message::Pieces(PieceMsg::Request(PieceRef {
        transfer: T,
        piece: 7,
    }));
    root.handle(Time::from_secs_f64(1.0), msg(1, request), &mut out)
        .unwrap();
    assert!(out.as_slice().contains(&Output::Aborted(
        windrose_proto::AbortReason::SourceChanged { piece: 7 }
    )));
    assert!(sends(&mut out).is_empty(), "the bad piece was sent");
    assert_eq!(root.status(), windrose_proto::Status::Aborted);
}
