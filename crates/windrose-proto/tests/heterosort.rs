//! HeteroSort's machines driven together by a test driver: messages through the real wire
//! format, FIFO per ordered pair, the next event drawn at random among the pending ones (a
//! seeded RNG), compute tasks answered at random times. Checks against an independent method:
//! the records' multiset (count and order-independent checksum of the sort benchmark's format)
//! and the order of the concatenation, from `windrose_model::records`.

mod common;

use bytes::Bytes;
use common::records::{any_shape, benchmark_records, shares};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use windrose_model::records::{KeyDistribution, RecordSummary, RECORD_LEN};
use windrose_model::{ClusterId, NodeId};
use windrose_proto::collective::{self, BuildContext, CollectiveSpec, Start};
use windrose_proto::frame::{self, Decoder, Family, Message, TransferId};
use windrose_proto::heterosort::{load_target, HeteroSort, HsortMsg, HsortSpec, Slicing};
use windrose_proto::{Command, Input, Output, Outputs, Protocol, ProtocolError, Time};

const T: TransferId = TransferId(3);

fn spec(rows: u32, cols: u32, record_len: u32, slicing: Slicing, speeds: Vec<f64>) -> HsortSpec {
    HsortSpec {
        rows,
        cols,
        record_len,
        slicing,
        speeds,
    }
}

/// What a run ends with.
struct Outcome {
    /// Each rank's delivered bytes.
    delivered: Vec<Bytes>,
    /// Each rank's record count after every cycle.
    history: Vec<Vec<u64>>,
    /// The first cycle found sorted.
    sorted_at: u32,
    /// Cycles run.
    cycles: u32,
    /// Frames by kind name.
    frames: BTreeMap<&'static str, u64>,
    /// Records sent in slice frames (handoffs included).
    slice_records: u64,
}

fn wire(m: &Message) -> Message {
    let mut d = Decoder::new();
    d.push(&frame::encode(m).unwrap());
    d.next_message().unwrap().unwrap()
}

/// Runs one machine per member (ids `0..n` shuffled into the member list, so the rank is the
/// id's place) to the end.
fn drive(mut nodes: Vec<HeteroSort>, seed: u64) -> Outcome {
    let n = nodes.len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut links: BTreeMap<(usize, usize), VecDeque<Message>> = BTreeMap::new();
    let mut computing: Vec<Option<u32>> = vec![None; n];
    let mut delivered = vec![None; n];
    let mut finished = vec![false; n];
    let mut frames: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut slice_records = 0u64;
    let mut out = Outputs::new();
    let idx = |id: NodeId| id.0 as usize;
    let mut perform = |i: usize,
                       out: &mut Outputs,
                       links: &mut BTreeMap<(usize, usize), VecDeque<Message>>,
                       computing: &mut Vec<Option<u32>>,
                       delivered: &mut Vec<Option<Bytes>>,
                       finished: &mut Vec<bool>| {
        for o in out.drain() {
            match o {
                Output::Send(t) => {
                    *frames.entry(t.message.kind().name()).or_default() += 1;
                    if let Message::HeteroSort(HsortMsg::Slice {
                        records,
                        record_len,
                        ..
                    }) = &t.message
                    {
                        slice_records += (records.len() / usize::from(*record_len)) as u64;
                    }
                    t.message.validate().unwrap();
                    links
                        .entry((i, idx(t.to)))
                        .or_default()
                        .push_back(wire(&t.message));
                }
                Output::Compute(task) => {
                    assert!(computing[i].is_none(), "two tasks at once on {i}");
                    assert_eq!(
                        task.len,
                        task.data.iter().map(|d| d.len() as u64).sum::<u64>()
                    );
                    computing[i] = Some(task.task.0);
                }
                Output::Deliver { offset, data, .. } => {
                    assert_eq!(offset, 0);
                    assert!(delivered[i].replace(data).is_none(), "two deliveries");
                }
                Output::Finished => finished[i] = true,
                Output::Aborted(r) => panic!("node {i} aborted: {r}"),
                Output::Report(_) | Output::SetTimer { .. } | Output::CancelTimer(_) => {}
            }
        }
    };
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.gen_range(0..=i));
    }
    for &i in &order {
        nodes[i].handle(Time::ZERO, Input::Start, &mut out).unwrap();
        perform(
            i,
            &mut out,
            &mut links,
            &mut computing,
            &mut delivered,
            &mut finished,
        );
    }
    let mut steps = 0u64;
    loop {
        let mut choices: Vec<(usize, Option<usize>)> = links
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&(from, to), _)| (to, Some(from)))
            .collect();
        choices.extend(
            computing
                .iter()
                .enumerate()
                .filter(|(_, c)| c.is_some())
                .map(|(i, _)| (i, None)),
        );
        if choices.is_empty() {
            break;
        }
        steps += 1;
        assert!(steps < 10_000_000, "the run does not end");
        let (to, from) = choices[rng.gen_range(0..choices.len())];
        let input = match from {
            Some(from) => Input::Message {
                from: NodeId(from as u32),
                message: links.get_mut(&(from, to)).unwrap().pop_front().unwrap(),
            },
            None => Input::Command(Command::ComputeDone {
                task: windrose_proto::TaskId(computing[to].take().unwrap()),
            }),
        };
        nodes[to].handle(Time::ZERO, input, &mut out).unwrap();
        perform(
            to,
            &mut out,
            &mut links,
            &mut computing,
            &mut delivered,
            &mut finished,
        );
    }
    assert!(finished.iter().all(|&f| f), "not every node finished");
    let cycles = nodes[0].cycle();
    assert!(nodes.iter().all(|m| m.cycle() == cycles));
    let sorted_at = nodes[0].sorted_at().unwrap();
    assert_eq!(cycles, sorted_at + 1);
    Outcome {
        delivered: delivered.into_iter().map(Option::unwrap).collect(),
        history: nodes.iter().map(|m| m.history().to_vec()).collect(),
        sorted_at,
        cycles,
        frames,
        slice_records,
    }
}

fn machines(spec: &HsortSpec, inputs: &[Bytes]) -> Vec<HeteroSort> {
    let ids: Vec<NodeId> = (0..inputs.len() as u32).map(NodeId).collect();
    inputs
        .iter()
        .enumerate()
        .map(|(i, input)| HeteroSort::new(NodeId(i as u32), &ids, T, spec, input.clone()).unwrap())
        .collect()
}

/// Checks the outcome against the inputs; returns the concatenation's summary.
fn check(inputs: &[Bytes], o: &Outcome) -> RecordSummary {
    let mut want = RecordSummary::new();
    for i in inputs {
        want.push_all(i);
    }
    let mut got = RecordSummary::new();
    for (rank, d) in o.delivered.iter().enumerate() {
        assert!(!d.is_empty(), "rank {rank} ends empty");
        got = got.then(&RecordSummary::of(d));
    }
    assert_eq!(got.records, want.records, "records lost or duplicated");
    assert_eq!(got.checksum, want.checksum, "the multiset changed");
    assert!(got.is_sorted(), "not sorted: {got:?}");
    // Contiguous ranges: each rank's largest record is at most the next rank's smallest
    // (whole records, ties broken by the bytes after the key).
    for w in o.delivered.windows(2) {
        assert!(w[0][w[0].len() - RECORD_LEN..] <= w[1][..RECORD_LEN]);
    }
    got
}

/// Inversions of the concatenation of sorted blocks, by brute force.
fn inversions(blocks: &[Vec<Vec<u8>>]) -> u64 {
    let all: Vec<&Vec<u8>> = blocks.iter().flatten().collect();
    let mut inv = 0;
    for i in 0..all.len() {
        for j in i + 1..all.len() {
            inv += u64::from(all[i] > all[j]);
        }
    }
    inv
}

/// A 2 x 2 torus, one-byte records, each node's records the reverse of where they belong.
/// Snake ranks 0 1 / 3 2; every node trades with both snake neighbours; counts stay 3.
#[test]
fn hand_driven_two_by_two_run_sorts_the_reversed_set() {
    let s = spec(2, 2, 1, Slicing::Equal, Vec::new());
    let inputs: Vec<Bytes> = [[9u8, 10, 11], [6, 7, 8], [3, 4, 5], [0, 1, 2]]
        .iter()
        .map(|r| Bytes::copy_from_slice(r))
        .collect();
    let mut nodes = machines(&s, &inputs);
    let mut out = Outputs::new();
    // Cycle 1 (odd): rank 0 is matched with rank 1, its partners are 1 and 3; its list is
    // [0, 1, 3]: it keeps its bottom third, trades its top record with 1 (the boundary) and
    // the rest is cut in list order.
    nodes[0].handle(Time::ZERO, Input::Start, &mut out).unwrap();
    let sends: Vec<(u32, HsortMsg)> = out
        .drain()
        .map(|o| match o {
            Output::Send(t) => match t.message {
                Message::HeteroSort(m) => (t.to.0, m),
                m => panic!("{m:?}"),
            },
            o => panic!("{o:?}"),
        })
        .collect();
    let slice_of = |m: &HsortMsg| match m {
        HsortMsg::Slice {
            records,
            handoff,
            count,
            cycle,
            ..
        } => (*cycle, *count, *handoff, records.to_vec()),
        m => panic!("{m:?}"),
    };
    assert_eq!(sends.len(), 2);
    assert_eq!(sends[0].0, 1);
    assert_eq!(slice_of(&sends[0].1), (1, 3, 0, vec![11]));
    assert_eq!(sends[1].0, 3);
    assert_eq!(slice_of(&sends[1].1), (1, 3, 0, vec![10]));
    // A frame from a node that is not in the sort, and one of a far cycle, are refused.
    let stray = HsortMsg::Verdict {
        transfer: T,
        cycle: 1,
        sorted: true,
    };
    let err = nodes[0]
        .handle(
            Time::ZERO,
            Input::Message {
                from: NodeId(9),
                message: stray.clone().into(),
            },
            &mut out,
        )
        .unwrap_err();
    assert!(err.to_string().contains("outside the sort"), "{err}");
    let far = HsortMsg::Slice {
        transfer: T,
        cycle: 5,
        count: 3,
        record_len: 1,
        handoff: 0,
        records: Bytes::from_static(b"a"),
        more: false,
    };
    let err = nodes[0]
        .handle(
            Time::ZERO,
            Input::Message {
                from: NodeId(1),
                message: far.into(),
            },
            &mut out,
        )
        .unwrap_err();
    assert!(
        matches!(err, ProtocolError::UnexpectedMessage { .. }),
        "{err}"
    );
    assert!(out.is_empty());
    // Then the rest through the random driver: the set ends sorted, 3 records each.
    let o = drive(machines(&s, &inputs), 1);
    check_bytes(&inputs, &o);
    let all: Vec<u8> = o.delivered.iter().flat_map(|d| d.to_vec()).collect();
    assert_eq!(all, (0..12).collect::<Vec<u8>>());
    assert!(o.history.iter().all(|h| h.iter().all(|&c| c == 3)));
    assert!(o.sorted_at <= 6, "sorted at cycle {}", o.sorted_at);
    eprintln!(
        "2x2 reversed: sorted at cycle {}, frames {:?}",
        o.sorted_at, o.frames
    );
}

#[test]
fn a_sorted_input_stops_after_the_first_verdict_and_one_node_sorts_alone() {
    let s = spec(2, 3, 1, Slicing::Equal, Vec::new());
    let inputs: Vec<Bytes> = (0..6u8)
        .map(|i| Bytes::from(vec![i * 10, i * 10 + 1, i * 10 + 2]))
        .collect();
    let o = drive(machines(&s, &inputs), 2);
    check_bytes(&inputs, &o);
    assert_eq!((o.sorted_at, o.cycles), (1, 2));
    // No check or verdict of the last cycle: one wave of 5 checks and 5 verdicts.
    assert_eq!(o.frames["hsort_check"], 5);
    assert_eq!(o.frames["hsort_verdict"], 5);
    let one = spec(1, 1, 1, Slicing::Equal, Vec::new());
    let o = drive(machines(&one, &[Bytes::from_static(b"zyx")]), 3);
    assert_eq!(o.delivered[0], Bytes::from_static(b"xyz"));
    assert_eq!(o.cycles, 2);
}

#[test]
fn bad_inputs_and_specs_are_refused_with_what_and_where() {
    let ids: Vec<NodeId> = (0..4).map(NodeId).collect();
    let s = spec(2, 2, 100, Slicing::Equal, Vec::new());
    let one = Bytes::from(vec![0u8; 100]);
    let e =
        |s: &HsortSpec, input: Bytes| HeteroSort::new(NodeId(1), &ids, T, s, input).unwrap_err();
    assert!(e(&s, Bytes::new()).contains("node 1: an empty input share"));
    assert!(e(&s, Bytes::from(vec![0u8; 150])).contains("150 bytes is not whole records of 100"));
    assert!(e(&spec(3, 2, 100, Slicing::Equal, vec![]), one.clone())
        .contains("has 6 nodes, the group has 4"));
    assert!(e(&spec(2, 2, 0, Slicing::Equal, vec![]), one.clone()).contains("record_len 0"));
    assert!(
        e(&spec(2, 2, 100, Slicing::Speed, vec![1.0; 3]), one.clone())
            .contains("3 speeds given for 4")
    );
    assert!(e(
        &spec(2, 2, 100, Slicing::Speed, vec![1.0, 0.0, 1.0, 1.0]),
        one.clone()
    )
    .contains("speed 1 is 0"));
    assert!(HeteroSort::new(NodeId(7), &ids, T, &s, one.clone())
        .unwrap_err()
        .contains("node 7 is not a member"));
    // Through the registry: the initiator's data is refused, the local input is used.
    let ctx = |me: u32, local: Bytes| BuildContext {
        me: NodeId(me),
        root: NodeId(0),
        transfer: T,
        total_len: 0,
        members: (0..4).map(|i| (NodeId(i), ClusterId(0))).collect(),
        idle_timeout: None,
        seed: 0,
        verifier: Arc::new(windrose_proto::pieces::Blake3Verifier),
        keeper: None,
        local_input: local,
    };
    let cs = CollectiveSpec::HeteroSort(s.clone());
    assert_eq!(cs.name(), "heterosort");
    let json = serde_json::to_string(&cs).unwrap();
    assert_eq!(
        json,
        r#"{"heterosort":{"rows":2,"cols":2,"record_len":100,"slicing":"equal"}}"#
    );
    assert_eq!(serde_json::from_str::<CollectiveSpec>(&json).unwrap(), cs);
    let err = collective::build(&cs, &ctx(0, one.clone()), Start::Root(one.clone()))
        .err()
        .unwrap();
    assert!(err.contains("takes no data from its initiator"), "{err}");
    let built = collective::build(&cs, &ctx(2, one.clone()), Start::Fresh).unwrap();
    // Rank 2 of the 2 x 2 snake (0 1 / 3 2) trades with 1 and 3.
    assert_eq!(built.neighbours, vec![NodeId(1), NodeId(3)]);
    let err = collective::build(&cs, &ctx(2, Bytes::new()), Start::Fresh)
        .err()
        .unwrap();
    assert!(err.contains("empty input share"), "{err}");
}

#[test]
fn frames_round_trip_and_bad_fields_are_refused() {
    let msgs = [
        HsortMsg::Slice {
            transfer: T,
            cycle: 4,
            count: 1 << 40,
            record_len: 2,
            handoff: 1,
            records: Bytes::from_static(b"abcd"),
            more: true,
        },
        HsortMsg::Check {
            transfer: T,
            cycle: 1,
            ok: true,
            max: Bytes::from_static(b"zz"),
        },
        HsortMsg::Check {
            transfer: T,
            cycle: 2,
            ok: false,
            max: Bytes::new(),
        },
        HsortMsg::Verdict {
            transfer: T,
            cycle: u32::MAX,
            sorted: false,
        },
    ];
    for m in msgs {
        let w: Message = m.clone().into();
        assert_eq!(wire(&w), w);
    }
    let bad = |m: HsortMsg| Message::from(m).validate().unwrap_err().to_string();
    let slice = |cycle, record_len, handoff, records: &'static [u8]| HsortMsg::Slice {
        transfer: T,
        cycle,
        count: 9,
        record_len,
        handoff,
        records: Bytes::from_static(records),
        more: false,
    };
    assert!(bad(slice(0, 2, 0, b"ab")).contains("cycle 0"));
    assert!(bad(slice(1, 0, 0, b"")).contains("record length 0"));
    assert!(bad(slice(1, 2, 0, b"abc")).contains("3 payload bytes are not whole records of 2"));
    assert!(bad(slice(1, 2, 3, b"abcd")).contains("3 handoff records but only 2"));
    // A flag byte other than 0 or 1 on the wire.
    let mut f = frame::encode(&Message::from(HsortMsg::Verdict {
        transfer: T,
        cycle: 1,
        sorted: true,
    }))
    .unwrap()
    .to_vec();
    *f.last_mut().unwrap() = 7;
    let mut d = Decoder::new();
    d.push(&f);
    assert!(d
        .next_message()
        .unwrap_err()
        .to_string()
        .contains("flag byte 7"));
    assert_eq!(HsortMsg::FAMILY, 7);
}

#[test]
fn the_load_target_is_the_integer_minimum_and_keeps_a_balanced_pair() {
    for t in 2..60u64 {
        for (wl, wh) in [(1, 1), (1, 2), (4, 1), (3, 7), (1_000_000, 1)] {
            for lo in 1..t {
                let x = load_target(lo, t - lo, wl, wh);
                let cost = |x: u64| (x * x * wh + (t - x) * (t - x) * wl) as u128;
                let best = (1..t).map(cost).min().unwrap();
                assert_eq!(cost(x), best, "t {t} w {wl}/{wh} lo {lo}");
                assert!((1..t).contains(&x));
                if cost(lo) == best {
                    assert_eq!(x, lo, "a minimum stays put");
                }
            }
        }
    }
}

/// Small sets in random order: the run ends within the docs' bound `2 (I_0 + L_0) + 3`.
#[test]
fn cycles_stay_within_the_proved_bound() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for (r, c) in [(1, 2), (2, 2), (2, 3), (3, 3)] {
        for round in 0..20 {
            let n = r * c;
            let inputs: Vec<Bytes> = (0..n)
                .map(|_| {
                    let k = rng.gen_range(1..6);
                    Bytes::from((0..k).map(|_| rng.gen_range(0..20u8)).collect::<Vec<u8>>())
                })
                .collect();
            let blocks: Vec<Vec<Vec<u8>>> = inputs
                .iter()
                .map(|b| {
                    let mut v: Vec<Vec<u8>> = b.iter().map(|&x| vec![x]).collect();
                    v.sort();
                    v
                })
                .collect();
            let i0 = inversions(&blocks);
            let l0: u64 = inputs.iter().map(|b| (b.len() * b.len()) as u64).sum();
            let s = spec(r as u32, c as u32, 1, Slicing::Equal, Vec::new());
            let o = drive(machines(&s, &inputs), round);
            check_bytes(&inputs, &o);
            assert!(
                u64::from(o.cycles) <= 2 * (i0 + l0) + 3,
                "{r}x{c}: {} cycles, I0 {i0}, L0 {l0}",
                o.cycles
            );
        }
    }
}

/// The one-byte-record version of [`check`].
fn check_bytes(inputs: &[Bytes], o: &Outcome) {
    let mut want: Vec<u8> = inputs.iter().flat_map(|b| b.to_vec()).collect();
    want.sort_unstable();
    let got: Vec<u8> = o.delivered.iter().flat_map(|b| b.to_vec()).collect();
    assert_eq!(got, want);
    assert!(o.delivered.iter().all(|d| !d.is_empty()));
}

fn shapes() -> impl Strategy<Value = (u32, u32)> {
    prop::sample::select(vec![(1u32, 2u32), (2, 2), (2, 3), (3, 3), (4, 4)])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random benchmark records (uniform, skewed, few distinct or all-equal keys, already
    /// sorted or reversed along the snake), random shares, random
    /// speeds and either slicing, random delivery order: sorted, nothing lost or duplicated,
    /// each rank's range contiguous.
    #[test]
    fn any_records_end_sorted_and_whole(
        (rows, cols) in shapes(),
        shape in any_shape(),
        counts in prop::collection::vec(1usize..40, 16),
        speeds in prop::collection::vec(0.25f64..4.0, 16),
        speed in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let n = (rows * cols) as usize;
        // Sorted and reverse shapes are sorted along the snake (rank order).
        let inputs = shares(shape, &counts[..n], seed);
        let slicing = if speed { Slicing::Speed } else { Slicing::Equal };
        let s = spec(rows, cols, RECORD_LEN as u32, slicing, speeds[..n].to_vec());
        let o = drive(machines(&s, &inputs), seed);
        check(&inputs, &o);
    }
}

/// Speeds 1, 2 and 4 over a 4 x 4 torus, unequal input shares (50 to 350 records): the paper's equal slices against
/// speed-proportional ones. Prints, per mode: the cycle the loads are first within 10 % of
/// their targets (equal shares, or shares proportional to speed), the cycle the set is
/// sorted, and the final counts beside the speeds. Run with `--nocapture` to see the table.
#[test]
fn load_balances_before_the_set_is_sorted() {
    let n = 16usize;
    let speeds: Vec<f64> = (0..n).map(|i| [1.0, 2.0, 4.0][i % 3]).collect();
    let shares: Vec<usize> = (0..n).map(|i| 50 + 50 * ((i * 5) % 7)).collect();
    let total = shares.iter().sum::<usize>() as f64;
    let mut first = 0;
    let inputs: Vec<Bytes> = shares
        .iter()
        .map(|&k| {
            let b = benchmark_records(19, first, k, KeyDistribution::Uniform);
            first += k as u64;
            b
        })
        .collect();
    println!("mode   | balanced (10 %) at cycle | sorted at cycle | final counts (speed 1 / 2 / 4: mean)");
    for slicing in [Slicing::Equal, Slicing::Speed] {
        let s = spec(4, 4, RECORD_LEN as u32, slicing, speeds.clone());
        let o = drive(machines(&s, &inputs), 5);
        check(&inputs, &o);
        let sum: f64 = speeds.iter().sum();
        let target = |i: usize| match slicing {
            Slicing::Equal => total / n as f64,
            Slicing::Speed => total * speeds[i] / sum,
        };
        let cycles = o.history[0].len();
        let balanced = (0..cycles).find(|&c| {
            (0..n).all(|i| ((o.history[i][c] as f64) - target(i)).abs() <= 0.1 * target(i))
        });
        let mean = |sp: f64| {
            let v: Vec<f64> = (0..n)
                .filter(|&i| speeds[i] == sp)
                .map(|i| *o.history[i].last().unwrap() as f64)
                .collect();
            v.iter().sum::<f64>() / v.len() as f64
        };
        println!(
            "{:6} | {:>24} | {:>15} | {:.0} / {:.0} / {:.0}",
            format!("{slicing:?}").to_lowercase(),
            balanced.map_or("never".to_string(), |c| c.to_string()),
            o.sorted_at,
            mean(1.0),
            mean(2.0),
            mean(4.0)
        );
        let balanced = balanced.expect("the loads balance");
        assert!(
            balanced as u32 <= o.sorted_at,
            "{slicing:?}: balanced at {balanced}, sorted at {}",
            o.sorted_at
        );
        if slicing == Slicing::Speed {
            assert!(mean(4.0) > 3.0 * mean(1.0));
        }
    }
}

/// Slices larger than one frame's payload travel in several frames (`more` set on all but the
/// last) and still end sorted and whole; no frame payload exceeds the limit.
#[test]
fn large_slices_travel_in_several_frames() {
    use windrose_proto::heterosort::MAX_SLICE_PAYLOAD;
    let per_node = 3 * MAX_SLICE_PAYLOAD / RECORD_LEN;
    // Uniform keys on both nodes: about half of each must cross.
    let inputs = vec![
        benchmark_records(8, 0, per_node, KeyDistribution::Uniform),
        benchmark_records(8, per_node as u64, per_node, KeyDistribution::Uniform),
    ];
    let s = spec(1, 2, RECORD_LEN as u32, Slicing::Equal, Vec::new());
    let mut nodes = machines(&s, &inputs);
    let mut out = Outputs::new();
    nodes[0].handle(Time::ZERO, Input::Start, &mut out).unwrap();
    let sizes: Vec<(usize, bool)> = out
        .drain()
        .map(|o| match o {
            Output::Send(t) => match t.message {
                Message::HeteroSort(HsortMsg::Slice { records, more, .. }) => (records.len(), more),
                m => panic!("{m:?}"),
            },
            o => panic!("{o:?}"),
        })
        .collect();
    // 1 x 2: one partner, the boundary slice is half the records (1.5 frames' worth).
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    assert!(sizes.iter().all(|&(len, _)| len <= MAX_SLICE_PAYLOAD));
    assert_eq!(
        sizes.iter().map(|&(_, more)| more).collect::<Vec<_>>(),
        [true, false]
    );
    let o = drive(machines(&s, &inputs), 4);
    check(&inputs, &o);
    assert!(o.frames["hsort_slice"] > 2 * u64::from(o.cycles));
}

/// A member that fails aborts its partners' runs: this step has no backups (issue 19 point 3),
/// so a failure ends the run everywhere it is declared, rather than leaving it waiting.
#[test]
fn a_failed_peer_aborts_the_run() {
    let s = spec(2, 2, 1, Slicing::Equal, Vec::new());
    let inputs: Vec<Bytes> = (0..4u8).map(|i| Bytes::from(vec![9 - i, i])).collect();
    let mut nodes = machines(&s, &inputs);
    let mut out = Outputs::new();
    nodes[1].handle(Time::ZERO, Input::Start, &mut out).unwrap();
    out.clear();
    nodes[1]
        .handle(Time::ZERO, Input::PeerFailed(NodeId(2)), &mut out)
        .unwrap();
    assert_eq!(
        out.as_slice(),
        [Output::Aborted(windrose_proto::AbortReason::PeerFailed {
            peer: NodeId(2)
        })]
    );
    assert_eq!(nodes[1].status(), windrose_proto::Status::Aborted);
    out.clear();
    // Late frames are taken and ignored.
    let late = HsortMsg::Verdict {
        transfer: T,
        cycle: 1,
        sorted: false,
    };
    nodes[1]
        .handle(
            Time::ZERO,
            Input::Message {
                from: NodeId(2),
                message: late.into(),
            },
            &mut out,
        )
        .unwrap();
    assert!(out.is_empty());
}

/// Cycles to sorted and data moved per record against the number of nodes, 100 uniform
/// records per node, equal slices (printed with `--nocapture`).
#[test]
fn cycles_and_data_moved_against_the_number_of_nodes() {
    println!("nodes | cycles to sorted | slice records sent per record");
    for side in [2u32, 3, 4, 6, 8] {
        let n = (side * side) as usize;
        let inputs: Vec<Bytes> = (0..n)
            .map(|i| benchmark_records(23, (i * 100) as u64, 100, KeyDistribution::Uniform))
            .collect();
        let s = spec(side, side, RECORD_LEN as u32, Slicing::Equal, Vec::new());
        let nodes = machines(&s, &inputs);
        let o = drive(nodes, u64::from(side));
        check(&inputs, &o);
        println!(
            "{n:5} | {:16} | {:.1}",
            o.sorted_at,
            o.slice_records as f64 / (n * 100) as f64
        );
    }
}
