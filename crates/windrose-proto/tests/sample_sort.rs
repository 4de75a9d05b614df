//! The sample sort baseline's machines run together through the in-test driver (real wire
//! format, one FIFO queue, compute tasks answered at once), checked against brute force: the
//! concatenation of the members' ranges in rank order is the sorted input multiset.

use crate::common;

use bytes::Bytes;
use common::records::{any_shape, shares, Shape};
use proptest::prelude::*;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use windrose_model::records::{RecordSummary, RECORD_LEN};
use windrose_model::{ClusterId, NodeId};
use windrose_proto::collective::{self, BuildContext, CollectiveSpec, Start};
use windrose_proto::frame::{self, Decoder, Family, Message, TransferId};
use windrose_proto::sample_sort::{
    sample_positions, splitters, SampleSort, SampleSortSpec, SsortMsg, MAX_BUCKET_PAYLOAD,
};
use windrose_proto::sort_zip::Compress;
use windrose_proto::{AbortReason, Input, Output, Outputs, Protocol, Status, Time};

const T: TransferId = TransferId(5);

fn machines(spec: &SampleSortSpec, inputs: &[Bytes], seed: u64) -> Vec<SampleSort> {
    let ids: Vec<NodeId> = (0..inputs.len() as u32).map(NodeId).collect();
    let mut m: Vec<SampleSort> = inputs
        .iter()
        .enumerate()
        .map(|(i, b)| SampleSort::new(NodeId(i as u32), &ids, T, spec, b.clone()).unwrap())
        .collect();
    // Start (and so first send) in a seeded random order.
    m.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    m
}

/// Runs the machines; returns each rank's delivered bytes and the run's log, and checks every
/// node computed the same `p - 1` splitters when any node had records.
fn run(mut nodes: Vec<SampleSort>) -> (Vec<Bytes>, common::RunLog) {
    let log = common::run(&mut nodes);
    let n = nodes.len();
    let mut out = vec![Bytes::new(); n];
    for m in &nodes {
        assert_eq!(m.status(), Status::Finished);
        assert_eq!(log.finished[&m.node()], 1);
        let d = &log.delivered[&m.node()];
        assert_eq!(d.len(), 1, "node {} delivered {} times", m.node(), d.len());
        assert_eq!(d[0].0, 0);
        out[m.rank()] = d[0].1.clone();
    }
    let any = out.iter().any(|r| !r.is_empty());
    for m in &nodes {
        assert_eq!(m.splitters(), nodes[0].splitters());
        assert_eq!(m.splitters().len(), if any { n - 1 } else { 0 });
    }
    (out, log)
}

/// The ranges against brute force: their concatenation is the sorted input.
fn check(inputs: &[Bytes], ranges: &[Bytes]) {
    let mut want: Vec<&[u8]> = inputs.iter().flat_map(|b| b.chunks(RECORD_LEN)).collect();
    want.sort_unstable();
    let got: Vec<&[u8]> = ranges.iter().flat_map(|b| b.chunks(RECORD_LEN)).collect();
    assert_eq!(got.len(), want.len(), "records lost or duplicated");
    assert!(got == want, "the ranges are not the sorted input");
    // The same through the order-independent checksum valsort uses.
    let mut a = RecordSummary::new();
    inputs.iter().for_each(|b| a.push_all(b));
    let b = ranges
        .iter()
        .fold(RecordSummary::new(), |s, r| s.then(&RecordSummary::of(r)));
    assert_eq!((a.records, a.checksum), (b.records, b.checksum));
    assert!(b.is_sorted());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// 1 to 64 members, every input shape, random shares and oversampling: the union of the
    /// outputs is the sorted input multiset, each rank's range after the one below it.
    #[test]
    fn any_records_on_1_to_64_members_end_sorted_and_whole(
        n in 1usize..=64,
        shape in any_shape(),
        counts in prop::collection::vec(1usize..40, 64),
        oversample in 1u32..6,
        seed in any::<u64>(),
        lz4 in any::<bool>(),
    ) {
        let inputs = shares(shape, &counts[..n], seed);
        let compress = if lz4 { Compress::Lz4 } else { Compress::None };
        let spec = SampleSortSpec { record_len: RECORD_LEN as u32, oversample, compress };
        let (ranges, _) = run(machines(&spec, &inputs, seed));
        check(&inputs, &ranges);
    }
}

/// Regular samples with their weights bound every range (the PSRS argument): 16 members with
/// unequal shares, every key shape but the ones with fewer distinct records than members.
/// No range exceeds twice the mean; printed with `--nocapture`.
#[test]
fn equal_weight_splitters_balance_the_ranges() {
    let counts: Vec<usize> = (0..16).map(|i| 200 + 150 * (i % 5)).collect();
    let total: usize = counts.iter().sum();
    for shape in Shape::ALL {
        let inputs = shares(shape, &counts, 3);
        let (ranges, _) = run(machines(
            &SampleSortSpec::new(RECORD_LEN as u32),
            &inputs,
            4,
        ));
        check(&inputs, &ranges);
        let sizes: Vec<usize> = ranges.iter().map(|r| r.len() / RECORD_LEN).collect();
        let max = *sizes.iter().max().unwrap();
        println!("{shape:?}: range sizes {sizes:?}");
        // Whole records compare, so equal keys with distinct payloads still spread.
        assert!(max * 16 < 2 * total, "{shape:?}: {sizes:?}");
    }
}

#[test]
fn samples_weights_and_splitters_by_hand() {
    // 10 records, 4 samples: positions 1, 4, 6, 9; weights 2, 3, 2, 3.
    assert_eq!(sample_positions(10, 4).collect::<Vec<_>>(), [1, 4, 6, 9]);
    assert_eq!(sample_positions(3, 3).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(sample_positions(5, 0).count(), 0);
    let b = |x: u8| Bytes::from(vec![x]);
    // Weights 2, 3, 2, 3 (total 10) over 2 ranks: the splitter is where the running weight
    // first reaches 5: the second sample.
    let s = [(b(1), 2), (b(4), 3), (b(6), 2), (b(9), 3)];
    assert_eq!(splitters(&s, 2), [b(4)]);
    // 5 ranks: quantiles 2, 4, 6, 8 reached at samples 1, 2, 3, 4.
    assert_eq!(splitters(&s, 5), [b(1), b(4), b(6), b(9)]);
    // A heavy sample reaches two quantiles: the splitter repeats, the rank between is empty.
    let heavy = [(b(1), 1), (b(2), 8), (b(3), 1)];
    assert_eq!(splitters(&heavy, 4), [b(2), b(2), b(2)]);
    assert!(splitters(&[], 3).is_empty());
    assert!(splitters(&s, 1).is_empty());
}

/// One-byte records, 3 members: the exact buckets, frames and deliveries.
#[test]
fn a_small_run_exchanges_samples_then_buckets_once() {
    let spec = SampleSortSpec {
        record_len: 1,
        oversample: 1,
        compress: Compress::None,
    };
    let inputs: Vec<Bytes> = [&[9u8, 1, 5][..], &[2, 8, 4], &[7, 3, 6]]
        .iter()
        .map(|r| Bytes::copy_from_slice(r))
        .collect();
    let mut nodes = machines(&spec, &inputs, 0);
    let log = common::run(&mut nodes);
    let ranges: Vec<Vec<u8>> = (0..3)
        .map(|i| log.delivered[&NodeId(i)][0].1.to_vec())
        .collect();
    // Samples: node 0 [1 5 9], node 1 [2 4 8], node 2 [3 6 7], weight 1 each; splitters at
    // running weights 3 and 6: records 3 and 6.
    assert_eq!(ranges, [vec![1, 2, 3], vec![4, 5, 6], vec![7, 8, 9]]);
    let count = |name: &str| log.frames.iter().filter(|f| f.kind.name() == name).count();
    assert_eq!((count("ssort_samples"), count("ssort_bucket")), (6, 6));
    // Each node: one local sort, one merge.
    assert!(log.computed.values().all(|t| t.len() == 2));
}

#[test]
fn empty_shares_and_one_member_runs_end_sorted() {
    let spec = SampleSortSpec::new(RECORD_LEN as u32);
    let mut inputs = shares(Shape::Uniform, &[30, 1, 30, 30], 9);
    inputs[1] = Bytes::new();
    let (ranges, _) = run(machines(&spec, &inputs, 1));
    check(&inputs, &ranges);
    let all_empty = vec![Bytes::new(); 3];
    let (ranges, _) = run(machines(&spec, &all_empty, 1));
    assert!(ranges.iter().all(Bytes::is_empty));
    let one = shares(Shape::Reverse, &[50], 2);
    let (ranges, log) = run(machines(&spec, &one, 1));
    check(&one, &ranges);
    assert!(log.frames.is_empty());
}

/// Buckets larger than a frame's payload travel in several frames.
#[test]
fn large_buckets_travel_in_several_frames() {
    let per_node = 3 * MAX_BUCKET_PAYLOAD / RECORD_LEN;
    let inputs = shares(Shape::Reverse, &[per_node, per_node], 6);
    let (ranges, log) = run(machines(
        &SampleSortSpec::new(RECORD_LEN as u32),
        &inputs,
        2,
    ));
    check(&inputs, &ranges);
    let buckets = log
        .frames
        .iter()
        .filter(|f| f.kind.name() == "ssort_bucket")
        .count();
    // Reversed: each node's whole share belongs to the other, in frames of whole records.
    let per_frame = MAX_BUCKET_PAYLOAD / RECORD_LEN;
    assert_eq!(buckets, 2 * per_node.div_ceil(per_frame));
    assert!(buckets > 2);
}

#[test]
fn bad_inputs_specs_and_frames_are_refused() {
    let ids: Vec<NodeId> = (0..3).map(NodeId).collect();
    let spec = SampleSortSpec::new(100);
    let e = |s: &SampleSortSpec, me: u32, input: Bytes| {
        SampleSort::new(NodeId(me), &ids, T, s, input).unwrap_err()
    };
    assert!(e(&spec, 1, Bytes::from(vec![0u8; 150]))
        .contains("node 1: the input of 150 bytes is not whole records of 100"));
    assert!(e(&spec, 7, Bytes::new()).contains("node 7 is not a member"));
    assert!(e(&SampleSortSpec::new(0), 1, Bytes::new()).contains("record_len 0"));
    let zero = SampleSortSpec {
        record_len: 100,
        oversample: 0,
        compress: Compress::None,
    };
    assert!(e(&zero, 1, Bytes::new()).contains("oversample 0"));
    // Through the registry: named sample_sort, the initiator's data refused.
    let cs = CollectiveSpec::SampleSort(spec.clone());
    assert_eq!(cs.name(), "sample_sort");
    let json = serde_json::to_string(&cs).unwrap();
    assert_eq!(json, r#"{"sample_sort":{"record_len":100,"oversample":4}}"#);
    let back: CollectiveSpec =
        serde_json::from_str(r#"{"sample_sort":{"record_len":100}}"#).unwrap();
    assert_eq!(back, cs);
    let ctx = |me: u32| BuildContext {
        me: NodeId(me),
        root: NodeId(0),
        transfer: T,
        total_len: 0,
        members: (0..3).map(|i| (NodeId(i), ClusterId(0))).collect(),
        idle_timeout: None,
        seed: 0,
        verifier: Arc::new(windrose_proto::pieces::Blake3Verifier),
        keeper: None,
        local_input: Bytes::from(vec![1u8; 200]),
    };
    let err = collective::build(&cs, &ctx(0), Start::Root(Bytes::from_static(b"x")))
        .err()
        .unwrap();
    assert!(err.contains("takes no data from its initiator"), "{err}");
    let built = collective::build(&cs, &ctx(1), Start::Fresh).unwrap();
    assert_eq!(built.neighbours, [NodeId(0), NodeId(2)]);
    assert!(collective::build(&cs, &ctx(1), Start::Rejoin(Vec::new())).is_err());

    // Frames: round trip, then bad fields.
    let wire = |m: &Message| {
        let mut d = Decoder::new();
        d.push(&frame::encode(m).unwrap());
        d.next_message()
    };
    for m in [
        SsortMsg::Samples {
            transfer: T,
            count: 1 << 40,
            record_len: 2,
            samples: Bytes::from_static(b"abcd"),
        },
        SsortMsg::Bucket {
            transfer: T,
            record_len: 3,
            records: Bytes::new(),
            more: true,
            packed: None,
        },
    ] {
        let m: Message = m.into();
        assert_eq!(wire(&m).unwrap().unwrap(), m);
    }
    let bad = |m: SsortMsg| Message::from(m).validate().unwrap_err().to_string();
    let samples = |count, record_len, b: &'static [u8]| SsortMsg::Samples {
        transfer: T,
        count,
        record_len,
        samples: Bytes::from_static(b),
    };
    assert!(bad(samples(9, 0, b"")).contains("record length 0"));
    assert!(bad(samples(9, 2, b"abc")).contains("3 payload bytes are not whole records of 2"));
    assert!(bad(samples(1, 1, b"ab")).contains("2 samples of only 1 records"));
    let mut f = frame::encode(&Message::from(SsortMsg::Bucket {
        transfer: T,
        record_len: 1,
        records: Bytes::new(),
        more: false,
        packed: None,
    }))
    .unwrap()
    .to_vec();
    *f.last_mut().unwrap() = 5;
    let mut d = Decoder::new();
    d.push(&f);
    assert!(d
        .next_message()
        .unwrap_err()
        .to_string()
        .contains("flag byte 5"));
    assert_eq!(SsortMsg::FAMILY, 8);

    // A machine refuses samples out of order, a second set, and a stranger's frames.
    let one = SampleSortSpec {
        record_len: 1,
        oversample: 1,
        compress: Compress::None,
    };
    let mut m = SampleSort::new(NodeId(0), &ids, T, &one, Bytes::from_static(b"ab")).unwrap();
    let mut out = Outputs::new();
    let mut send = |m: &mut SampleSort, from: u32, msg: SsortMsg| {
        m.handle(
            Time::ZERO,
            Input::Message {
                from: NodeId(from),
                message: msg.into(),
            },
            &mut out,
        )
        .map_err(|e| e.to_string())
    };
    assert!(send(&mut m, 1, samples(2, 1, b"ba"))
        .unwrap_err()
        .contains("samples out of order"));
    assert!(send(&mut m, 9, samples(2, 1, b"ab"))
        .unwrap_err()
        .contains("outside the sort"));
    send(&mut m, 1, samples(2, 1, b"ab")).unwrap();
    assert!(send(&mut m, 1, samples(2, 1, b"ab"))
        .unwrap_err()
        .contains("a second set of samples"));
}

#[test]
fn a_failed_peer_aborts_the_run() {
    let ids: Vec<NodeId> = (0..2).map(NodeId).collect();
    let spec = SampleSortSpec::new(1);
    let mut m = SampleSort::new(NodeId(0), &ids, T, &spec, Bytes::from_static(b"x")).unwrap();
    let mut out = Outputs::new();
    m.handle(Time::ZERO, Input::Start, &mut out).unwrap();
    out.clear();
    m.handle(Time::ZERO, Input::PeerFailed(NodeId(1)), &mut out)
        .unwrap();
    assert_eq!(
        out.as_slice(),
        [Output::Aborted(AbortReason::PeerFailed { peer: NodeId(1) })]
    );
    assert_eq!(m.status(), Status::Aborted);
}

/// With LZ4 (issue 19) the exchange carries the same records in fewer bytes: 8 members in 2
/// clusters end with the raw run's ranges, the buckets for the other cluster travel as
/// `ssort_zbucket` frames and those inside a cluster raw, and the run takes under half the
/// bytes on the wire.
#[test]
fn compressed_buckets_sort_the_same_in_fewer_bytes() {
    let n = 8u32;
    let inputs = shares(Shape::Uniform, &[2000; 8], 7);
    let clusters: Vec<(NodeId, ClusterId)> = (0..n)
        .map(|i| (NodeId(i), ClusterId::from(i as usize % 2)))
        .collect();
    let run_with = |compress| {
        let mut spec = SampleSortSpec::new(RECORD_LEN as u32);
        spec.compress = compress;
        let nodes = machines(&spec, &inputs, 1)
            .into_iter()
            .map(|m| m.with_clusters(&clusters))
            .collect();
        run(nodes)
    };
    let (raw, raw_log) = run_with(Compress::None);
    let (zip, zip_log) = run_with(Compress::Lz4);
    check(&inputs, &zip);
    assert_eq!(raw, zip);
    let kinds = |log: &common::RunLog, name: &str, across: bool| {
        log.frames
            .iter()
            .filter(|f| f.kind.name() == name && (f.from.0 % 2 != f.to.0 % 2) == across)
            .count()
    };
    assert_eq!(kinds(&raw_log, "ssort_zbucket", true), 0);
    // Each member's 4 buckets for the other cluster, about 250 records each, compressed; the 3
    // inside its cluster raw.
    assert_eq!(kinds(&zip_log, "ssort_zbucket", true), 8 * 4);
    assert_eq!(kinds(&zip_log, "ssort_zbucket", false), 0);
    assert_eq!(kinds(&zip_log, "ssort_bucket", true), 0);
    assert_eq!(kinds(&zip_log, "ssort_bucket", false), 8 * 3);
    assert!(
        zip_log.wire_bytes * 3 < raw_log.wire_bytes * 2,
        "{} bytes compressed, {} raw",
        zip_log.wire_bytes,
        raw_log.wire_bytes
    );
}

/// A compressed bucket whose payload does not decompress: the receiver aborts the run,
/// naming the sender and the frame, when its merge task ends (no panic, no delivery).
#[test]
fn a_corrupt_compressed_bucket_aborts_naming_its_sender() {
    let ids = [NodeId(0), NodeId(1)];
    let mut spec = SampleSortSpec::new(RECORD_LEN as u32);
    spec.compress = Compress::Lz4;
    let inputs = shares(Shape::Uniform, &[50, 50], 9);
    let mut m = SampleSort::new(NodeId(0), &ids, T, &spec, inputs[0].clone()).unwrap();
    let (n, z) = windrose_proto::sort_zip::pack(inputs[1].clone());
    let mut z = z.to_vec();
    let last = z.len() - 1;
    z[last] ^= 0xff;
    z.truncate(last - 7);
    let from1 = |message: SsortMsg| Input::Message {
        from: NodeId(1),
        message: message.into(),
    };
    let mut pending = vec![
        Input::Start,
        from1(SsortMsg::Samples {
            transfer: T,
            count: 1,
            record_len: RECORD_LEN as u16,
            samples: inputs[1].slice(..RECORD_LEN),
        }),
        from1(SsortMsg::Bucket {
            transfer: T,
            record_len: RECORD_LEN as u16,
            records: Bytes::from(z),
            more: false,
            packed: n,
        }),
    ];
    let mut aborted = Vec::new();
    let mut out = Outputs::new();
    while !pending.is_empty() {
        let input = pending.remove(0);
        m.handle(Time::ZERO, input, &mut out).unwrap();
        for o in out.drain() {
            match o {
                Output::Compute(t) => pending.insert(
                    0,
                    Input::Command(windrose_proto::Command::ComputeDone { task: t.task }),
                ),
                Output::Aborted(r) => aborted.push(r.to_string()),
                Output::Deliver { .. } | Output::Finished => panic!("a corrupt run delivered"),
                _ => {}
            }
        }
    }
    assert_eq!(
        aborted,
        ["node 1 sent a ssort_zbucket frame whose compressed records do not decompress"]
    );
    assert_eq!(m.status(), Status::Aborted);
}
