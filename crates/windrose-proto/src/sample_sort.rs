//! Sample sort, the baseline HeteroSort is measured against (issue 19 point 5): `p - 1`
//! equal-weight splitters from samples, then one all-to-all exchange.
//!
//! Every member starts with its own records (its [`BuildContext::local_input`]) and ends with a
//! sorted, contiguous range of the whole set, members ranked by id: rank 0 the smallest records.
//!
//! # A run
//! 1. **Local sort.** The machine asks for its records sorted ([`Output::Compute`], task 1,
//!    whose [`Job`] sorts them off the Host's event loop in the real driver; the simulator
//!    charges it by the node's speed as it does HeteroSort's, see [`crate::app`]).
//! 2. **Samples.** When task 1 is done the node sends every other member its record count and
//!    `s = min(count, oversample * p)` *regular samples*: the records at sorted positions
//!    `pos_k = (k + 1) * count / s - 1`, `k = 0..s`. Sample `k` stands for the records at
//!    positions `pos_{k-1} + 1 ..= pos_k`, so its weight is `pos_k - pos_{k-1}` and the weights
//!    of a node's samples add up to its count: a receiver recomputes them from the count and
//!    the number of samples alone. The node keeps its own samples too.
//! 3. **Splitters.** With every member's samples in, each node sorts all of them (ties: by
//!    rank, then position, so every node sorts them identically) and takes splitter `j`
//!    (`j = 1..p`) as the first sample whose running weight reaches `j / p` of the total:
//!    equal weights, whatever the members' speeds (that is the baseline). Every node computes
//!    the same splitters from the same numbers; no coordinator, no second round.
//! 4. **Exchange.** A record goes to the first rank `j` whose splitter is not below it (the last
//!    rank takes the rest); the node's records being sorted, each rank's bucket is one
//!    contiguous slice. It sends every other member its bucket, even an empty one (the
//!    receiver must know it is complete), in [`SsortMsg::Bucket`] frames of at most
//!    [`MAX_BUCKET_PAYLOAD`] bytes, `more` set on all but the last.
//! 5. **Merge.** With every member's bucket in, the node merges its own bucket and the received
//!    ones into its range (task 2, a [`Job`] as in step 1), then delivers it
//!    ([`Output::Deliver`] at offset 0, possibly empty: a node no splitter gives records to
//!    ends with none) and finishes.
//!
//! Records compare as whole byte strings, as in HeteroSort: the key (a prefix) decides and the
//! payload breaks ties, so many equal keys still spread over the nodes when their payloads
//! differ. Ranges are contiguous because bucket boundaries are the same splitters everywhere.
//!
//! A run exchanges `p (p - 1)` sample frames and at least `p (p - 1)` bucket frames; every
//! record crosses the network at most once. A failed member aborts the run (no backups).
//!
//! **Why every member gets every sample** rather than one coordinator choosing the splitters:
//! no extra round trip and no node whose failure or slowness holds up everyone's exchange. The
//! price is `p (p - 1) s` sample records on the wire, small beside the data while a share
//! holds many more than `4 p^2` records (16 members: 1,024; at the 1 GiB over 16
//! members, about 0.15 % of the bytes), but dominant for tiny shares on many members
//! (`windrose reproduce heterosort --full` shows it at 256 members and 200 records each).
//!
//! # Frames (family 8)
//!
//! | kind | name            | fixed fields                               | payload |
//! |------|-----------------|--------------------------------------------|---------|
//! | 1    | `ssort_samples` | transfer u32, count u64, record_len u16    | the sender's regular samples, in order |
//! | 2    | `ssort_bucket`  | transfer u32, record_len u16, more u8      | records of the receiver's range, sorted |
//!
//! `validate` refuses a zero record length, a payload that is not whole records, more samples
//! than the count, and a flag other than 0 or 1.

use crate::app::Job;
use crate::collective::{BuildContext, Built, CollectiveSpec, Start};
use crate::frame::{Family, FrameError, KindLayout, Message, MessageKind, TransferId};
use crate::node::{
    AbortReason, Command, ComputeTask, Input, Output, Outputs, Protocol, ProtocolError, Status,
    TaskId,
};
use crate::time::Time;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use windrose_model::NodeId;

/// The largest payload of one bucket frame (whole records, at least one).
pub const MAX_BUCKET_PAYLOAD: usize = 1 << 20;

/// Samples per member and per rank when the spec does not say.
pub const DEFAULT_OVERSAMPLE: u32 = 4;

const K_SAMPLES: u8 = 1;
const K_BUCKET: u8 = 2;
const TASK_SORT: TaskId = TaskId(1);
const TASK_MERGE: TaskId = TaskId(2);

/// A sample sort message: see the frame table in the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SsortMsg {
    /// The sender's record count and its regular samples.
    Samples {
        /// The run.
        transfer: TransferId,
        /// The sender's records.
        count: u64,
        /// Bytes per record.
        record_len: u16,
        /// The samples, `record_len` bytes each, in sorted order.
        samples: Bytes,
    },
    /// Part of the sender's records that belong to the receiver's range.
    Bucket {
        /// The run.
        transfer: TransferId,
        /// Bytes per record.
        record_len: u16,
        /// The records, sorted.
        records: Bytes,
        /// More frames of this bucket follow.
        more: bool,
    },
}

fn kind_of(kind: u8) -> MessageKind {
    MessageKind::of::<SsortMsg>(kind)
}

impl SsortMsg {
    /// The run the message belongs to.
    pub fn run(&self) -> TransferId {
        match self {
            SsortMsg::Samples { transfer, .. } | SsortMsg::Bucket { transfer, .. } => *transfer,
        }
    }

    fn record_len(&self) -> u16 {
        match self {
            SsortMsg::Samples { record_len, .. } | SsortMsg::Bucket { record_len, .. } => {
                *record_len
            }
        }
    }
}

impl Family for SsortMsg {
    const FAMILY: u8 = 8;
    const KINDS: &'static [KindLayout] = &[
        KindLayout {
            kind: K_SAMPLES,
            name: "ssort_samples",
            fixed: 14,
            payload: true,
        },
        KindLayout {
            kind: K_BUCKET,
            name: "ssort_bucket",
            fixed: 7,
            payload: true,
        },
    ];

    fn kind(&self) -> u8 {
        match self {
            SsortMsg::Samples { .. } => K_SAMPLES,
            SsortMsg::Bucket { .. } => K_BUCKET,
        }
    }

    fn transfer(&self) -> Option<TransferId> {
        Some(self.run())
    }

    fn payload(&self) -> Option<&Bytes> {
        match self {
            SsortMsg::Samples { samples, .. } => Some(samples),
            SsortMsg::Bucket { records, .. } => Some(records),
        }
    }

    fn put_fixed(&self, dst: &mut BytesMut) {
        dst.put_u32(self.run().0);
        match self {
            SsortMsg::Samples {
                count, record_len, ..
            } => {
                dst.put_u64(*count);
                dst.put_u16(*record_len);
            }
            SsortMsg::Bucket {
                record_len, more, ..
            } => {
                dst.put_u16(*record_len);
                dst.put_u8(u8::from(*more));
            }
        }
    }

    fn parse(kind: u8, mut body: Bytes) -> Result<Self, FrameError> {
        let msg = match kind {
            K_SAMPLES => {
                let transfer = TransferId(body.get_u32());
                let count = body.get_u64();
                let record_len = body.get_u16();
                SsortMsg::Samples {
                    transfer,
                    count,
                    record_len,
                    samples: body,
                }
            }
            K_BUCKET => {
                let transfer = TransferId(body.get_u32());
                let record_len = body.get_u16();
                let more = match body.get_u8() {
                    0 => false,
                    1 => true,
                    b => {
                        return Err(FrameError::Invalid {
                            kind: kind_of(kind),
                            what: format!("flag byte {b}, expected 0 or 1"),
                        })
                    }
                };
                SsortMsg::Bucket {
                    transfer,
                    record_len,
                    records: body,
                    more,
                }
            }
            _ => {
                return Err(FrameError::UnknownKind {
                    family: Self::FAMILY,
                    kind,
                })
            }
        };
        msg.validate()?;
        Ok(msg)
    }

    fn validate(&self) -> Result<(), FrameError> {
        let k = kind_of(self.kind());
        let len = usize::from(self.record_len());
        if len == 0 {
            return Err(crate::frame::inconsistent(k, "record length 0"));
        }
        let payload = self.payload().expect("both kinds carry records");
        if !payload.len().is_multiple_of(len) {
            return Err(FrameError::Invalid {
                kind: k,
                what: format!(
                    "{} payload bytes are not whole records of {len} bytes",
                    payload.len()
                ),
            });
        }
        if let SsortMsg::Samples { count, .. } = self {
            if (payload.len() / len) as u64 > *count {
                return Err(FrameError::Invalid {
                    kind: k,
                    what: format!("{} samples of only {count} records", payload.len() / len),
                });
            }
        }
        Ok(())
    }
}

/// The parameters of a sample sort run ([`CollectiveSpec::SampleSort`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleSortSpec {
    /// Bytes per record (100 for the sort benchmark's records).
    pub record_len: u32,
    /// Samples per member per rank (`s = oversample * p` per member, at most its count): more
    /// samples, splitters nearer the true quantiles, more bytes before the exchange.
    #[serde(default = "default_oversample")]
    pub oversample: u32,
}

fn default_oversample() -> u32 {
    DEFAULT_OVERSAMPLE
}

impl SampleSortSpec {
    /// The spec for records of `record_len` bytes with the default oversampling.
    pub fn new(record_len: u32) -> SampleSortSpec {
        SampleSortSpec {
            record_len,
            oversample: DEFAULT_OVERSAMPLE,
        }
    }

    fn check(&self) -> Result<(), String> {
        if self.record_len == 0 || self.record_len > u32::from(u16::MAX) {
            return Err(format!(
                "record_len {} is out of range 1..={}",
                self.record_len,
                u16::MAX
            ));
        }
        if self.oversample == 0 {
            return Err("oversample 0: each member must send at least one sample per rank".into());
        }
        Ok(())
    }
}

/// The sorted positions of the regular samples of `count` records, `s` of them (the docs'
/// `pos_k`): the last one is the largest record, and consecutive differences are the weights.
pub fn sample_positions(count: u64, s: u64) -> impl Iterator<Item = u64> {
    (0..s).map(move |k| ((u128::from(k) + 1) * u128::from(count) / u128::from(s)) as u64 - 1)
}

/// The `p - 1` splitters of weighted samples `(record, weight)` sorted by record: splitter `j`
/// is the first sample whose running weight times `p` reaches `j` times the total.
pub fn splitters(sorted: &[(Bytes, u64)], p: usize) -> Vec<Bytes> {
    weighted_splitters(sorted, &vec![1; p])
}

/// The `p - 1` splitters for ranks of weights `weights` (`p` of them, positive): splitter `j`
/// is the first sample whose running weight reaches the share `w_0 + ... + w_{j-1}` of the
/// total weight, so rank `j` gets about `w_j / sum w` of the records. Equal weights give
/// [`splitters`].
pub fn weighted_splitters(sorted: &[(Bytes, u64)], weights: &[u64]) -> Vec<Bytes> {
    let p = weights.len();
    let total: u128 = sorted.iter().map(|(_, w)| u128::from(*w)).sum();
    let wsum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let mut out = Vec::with_capacity(p.saturating_sub(1));
    let (mut run, mut next, mut cum) = (0u128, 0usize, 0u128);
    for &w in &weights[..p.saturating_sub(1)] {
        cum += u128::from(w);
        while next < sorted.len() && run * wsum < cum * total {
            run += u128::from(sorted[next].1);
            next += 1;
        }
        // The sample that reached the quantile; when an earlier one already had (heavy
        // samples), the splitter repeats and the rank between gets nothing.
        match next.checked_sub(1) {
            Some(k) => out.push(sorted[k].0.clone()),
            None => break, // no samples: no records anywhere
        }
    }
    out
}

/// Sorts the whole records (`len` bytes each) of `parts` into one packed buffer. Sorted parts
/// are runs the sort merges rather than sorts again (a stable sort finds them), so a merge of
/// `k` sorted buckets costs about `n log k`. Equal records are equal bytes, so stability does
/// not matter for the result.
pub(crate) fn sort_packed(parts: &[Bytes], len: usize) -> Bytes {
    let mut recs: Vec<&[u8]> = parts.iter().flat_map(|p| p.chunks_exact(len)).collect();
    recs.sort();
    let mut out = BytesMut::with_capacity(recs.len() * len);
    for r in recs {
        out.extend_from_slice(r);
    }
    out.freeze()
}

/// Records `0..n` of packed `sorted` (`len` bytes each) that are `<= key`: the first index
/// after them.
pub(crate) fn upper_bound(sorted: &[u8], len: usize, from: usize, key: &[u8]) -> usize {
    let n = sorted.len() / len;
    let (mut lo, mut hi) = (from, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if &sorted[mid * len..(mid + 1) * len] <= key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Where a node is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    Sorting,
    Sampling,
    Exchanging,
    Merging,
    Over,
}

/// One member of a sample sort run: see the [module docs](self).
///
/// Timers, randomness: none. Compute tasks: 1 (the local sort) and 2 (the merge).
#[derive(Clone, Debug)]
pub struct SampleSort {
    me: NodeId,
    rank: usize,
    ids: Vec<NodeId>,
    transfer: TransferId,
    record_len: usize,
    oversample: u64,
    /// The input records (unsorted), until the local sort takes them.
    input: Bytes,
    /// The node's records, sorted and packed (after the local sort; then the merged range).
    data: Bytes,
    /// The sort or merge in progress.
    job: Option<Job<Bytes>>,
    phase: Phase,
    status: Status,
    /// Each rank's samples with their weights, once known.
    samples: Vec<Option<Vec<(Bytes, u64)>>>,
    /// Each rank's bucket for this node as it arrives, and whether it is complete.
    buckets: Vec<(Vec<Bytes>, bool)>,
    splitters: Vec<Bytes>,
}

impl SampleSort {
    /// The machine of `me` among `members` (any order; ranked by id) with its own records
    /// `input` (whole records; may be empty).
    pub fn new(
        me: NodeId,
        members: &[NodeId],
        transfer: TransferId,
        spec: &SampleSortSpec,
        input: Bytes,
    ) -> Result<SampleSort, String> {
        spec.check()?;
        let mut ids = members.to_vec();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != members.len() {
            return Err("a member is listed twice".into());
        }
        let rank = ids
            .iter()
            .position(|&n| n == me)
            .ok_or_else(|| format!("node {me} is not a member of the sort"))?;
        let record_len = spec.record_len as usize;
        if !input.len().is_multiple_of(record_len) {
            return Err(format!(
                "node {me}: the input of {} bytes is not whole records of {record_len} bytes",
                input.len()
            ));
        }
        let p = ids.len();
        Ok(SampleSort {
            me,
            rank,
            ids,
            transfer,
            record_len,
            oversample: u64::from(spec.oversample),
            input,
            data: Bytes::new(),
            job: None,
            phase: Phase::Idle,
            status: Status::Running,
            samples: vec![None; p],
            buckets: vec![(Vec::new(), false); p],
            splitters: Vec::new(),
        })
    }

    /// This node's rank (its place in id order): its range is the `rank`-th.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The splitters, once computed (`p - 1` of them).
    pub fn splitters(&self) -> &[Bytes] {
        &self.splitters
    }

    fn p(&self) -> usize {
        self.ids.len()
    }

    /// Asks for `parts` sorted into one packed buffer, off the event loop (see [`crate::app`]).
    fn sort_job(&mut self, task: TaskId, parts: Vec<Bytes>, out: &mut Outputs) {
        let len = parts.iter().map(|p| p.len() as u64).sum();
        let record_len = self.record_len;
        let job = Job::new(move || sort_packed(&parts, record_len));
        out.push(Output::Compute(ComputeTask {
            task,
            offset: 0,
            len,
            data: Vec::new(),
            work: Some(job.work()),
        }));
        self.job = Some(job);
    }

    fn count(&self) -> usize {
        self.data.len() / self.record_len
    }

    fn record(&self, i: usize) -> Bytes {
        self.data
            .slice(i * self.record_len..(i + 1) * self.record_len)
    }

    fn pack(&self, records: &[Bytes]) -> Bytes {
        let mut b = BytesMut::with_capacity(records.len() * self.record_len);
        for r in records {
            b.extend_from_slice(r);
        }
        b.freeze()
    }

    fn sampled(&mut self, out: &mut Outputs) {
        let count = self.count() as u64;
        let s = count.min(self.oversample * self.p() as u64);
        let mine: Vec<Bytes> = sample_positions(count, s)
            .map(|i| self.record(i as usize))
            .collect();
        let payload = self.pack(&mine);
        for (q, &id) in self.ids.iter().enumerate() {
            if q != self.rank {
                out.send(
                    id,
                    Message::SampleSort(SsortMsg::Samples {
                        transfer: self.transfer,
                        count,
                        record_len: self.record_len as u16,
                        samples: payload.clone(),
                    }),
                );
            }
        }
        self.samples[self.rank] = Some(with_weights(count, mine));
        self.phase = Phase::Sampling;
        self.try_exchange(out);
    }

    fn try_exchange(&mut self, out: &mut Outputs) {
        if self.phase != Phase::Sampling || self.samples.iter().any(Option::is_none) {
            return;
        }
        // Every node sorts the same samples the same way: by record, then rank and position.
        let mut all: Vec<(Bytes, u64)> = Vec::new();
        for s in self.samples.iter_mut() {
            all.extend(s.take().expect("checked above"));
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        self.splitters = splitters(&all, self.p());
        let data = std::mem::take(&mut self.data);
        let len = self.record_len;
        let n = data.len() / len;
        let mut start = 0;
        let per_frame = (MAX_BUCKET_PAYLOAD / len).max(1) * len;
        for q in 0..self.p() {
            let end = match self.splitters.get(q) {
                Some(sp) => upper_bound(&data, len, start, sp),
                None => n,
            };
            // Zero-copy: a bucket is a contiguous range of the packed, sorted records.
            let bucket = data.slice(start * len..end * len);
            start = end;
            if q == self.rank {
                self.buckets[q] = (vec![bucket], true);
                continue;
            }
            let mut at = 0;
            loop {
                let to = (at + per_frame).min(bucket.len());
                let more = to < bucket.len();
                out.send(
                    self.ids[q],
                    Message::SampleSort(SsortMsg::Bucket {
                        transfer: self.transfer,
                        record_len: self.record_len as u16,
                        records: bucket.slice(at..to),
                        more,
                    }),
                );
                at = to;
                if !more {
                    break;
                }
            }
        }
        self.phase = Phase::Exchanging;
        self.try_merge(out);
    }

    fn try_merge(&mut self, out: &mut Outputs) {
        if self.phase != Phase::Exchanging || !self.buckets.iter().all(|(_, done)| *done) {
            return;
        }
        let mut range: Vec<Bytes> = Vec::new();
        for (b, _) in &mut self.buckets {
            range.append(b);
        }
        self.phase = Phase::Merging;
        self.sort_job(TASK_MERGE, range, out);
    }

    fn finish(&mut self, out: &mut Outputs) {
        self.phase = Phase::Over;
        self.status = Status::Finished;
        let data = self.data.clone();
        out.push(Output::Deliver {
            transfer: self.transfer,
            offset: 0,
            data,
        });
        out.push(Output::Finished);
    }

    fn on_message(
        &mut self,
        from: NodeId,
        msg: SsortMsg,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let kind = kind_of(msg.kind());
        msg.validate()
            .map_err(|source| ProtocolError::Frame { from, source })?;
        ProtocolError::check_transfer(from, kind, self.transfer, msg.run())?;
        let unexpected = |why| ProtocolError::UnexpectedMessage { from, kind, why };
        let Some(q) = self.ids.iter().position(|&n| n == from) else {
            return Err(unexpected("from a node outside the sort"));
        };
        if q == self.rank {
            return Err(unexpected("from this node itself"));
        }
        if usize::from(msg.record_len()) != self.record_len {
            return Err(ProtocolError::Inconsistent {
                from,
                kind,
                what: "record length differs from this run's",
            });
        }
        if self.phase == Phase::Over {
            return Ok(());
        }
        let len = self.record_len;
        let split = |b: &Bytes| -> Vec<Bytes> {
            (0..b.len() / len)
                .map(|i| b.slice(i * len..(i + 1) * len))
                .collect()
        };
        match msg {
            SsortMsg::Samples { count, samples, .. } => {
                if self.samples[q].is_some() || self.buckets[q].1 || !self.buckets[q].0.is_empty() {
                    return Err(unexpected("a second set of samples from one member"));
                }
                let s = split(&samples);
                if s.windows(2).any(|w| w[0] > w[1]) {
                    return Err(ProtocolError::Inconsistent {
                        from,
                        kind,
                        what: "samples out of order",
                    });
                }
                if count > 0 && s.is_empty() {
                    return Err(ProtocolError::Inconsistent {
                        from,
                        kind,
                        what: "no samples of a nonempty share",
                    });
                }
                self.samples[q] = Some(with_weights(count, s));
                self.try_exchange(out);
            }
            SsortMsg::Bucket { records, more, .. } => {
                if self.buckets[q].1 {
                    return Err(unexpected("bucket records after the member's last frame"));
                }
                if !records.is_empty() {
                    self.buckets[q].0.push(records);
                }
                self.buckets[q].1 = !more;
                self.try_merge(out);
            }
        }
        Ok(())
    }
}

/// A member's samples with their weights (see the module docs): the differences of their
/// positions, which add up to `count`.
pub(crate) fn with_weights(count: u64, samples: Vec<Bytes>) -> Vec<(Bytes, u64)> {
    let s = samples.len() as u64;
    let mut prev = 0u64;
    samples
        .into_iter()
        .zip(sample_positions(count, s))
        .map(|(r, pos)| {
            let w = pos + 1 - prev;
            prev = pos + 1;
            (r, w)
        })
        .collect()
}

impl Protocol for SampleSort {
    fn node(&self) -> NodeId {
        self.me
    }

    fn handle(&mut self, _now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        match input {
            Input::Start => {
                if self.phase == Phase::Idle {
                    self.phase = Phase::Sorting;
                    let input = std::mem::take(&mut self.input);
                    self.sort_job(TASK_SORT, vec![input], out);
                }
                Ok(())
            }
            Input::Message {
                from,
                message: Message::SampleSort(msg),
            } => self.on_message(from, msg, out),
            Input::Message { from, message } => Err(ProtocolError::UnexpectedMessage {
                from,
                kind: message.kind(),
                why: "a sample sort node takes only sample sort messages",
            }),
            Input::Command(Command::ComputeDone { task }) => {
                let mut sorted = || self.job.take().and_then(|j| j.result());
                match (self.phase, task) {
                    (Phase::Sorting, TASK_SORT) => {
                        self.data = sorted().expect("the local sort's job");
                        self.sampled(out)
                    }
                    (Phase::Merging, TASK_MERGE) => {
                        self.data = sorted().expect("the merge's job");
                        self.finish(out)
                    }
                    _ => return Err(ProtocolError::UnknownTask { task }),
                }
                Ok(())
            }
            Input::Timer(_) | Input::App(_) => Ok(()),
            Input::SendComplete { to, id } => Err(ProtocolError::UnknownSend { to, id }),
            Input::PeerFailed(peer) => {
                if self.status == Status::Running {
                    self.phase = Phase::Over;
                    self.status = Status::Aborted;
                    out.push(Output::Aborted(AbortReason::PeerFailed { peer }));
                }
                Ok(())
            }
        }
    }

    fn status(&self) -> Status {
        self.status
    }
}

/// The registry's builder ([`crate::collective`]): every member's records are its local input;
/// the initiator gives none; every member talks to every other.
pub(crate) fn build(
    spec: &CollectiveSpec,
    ctx: &BuildContext,
    start: Start,
) -> Result<Built, String> {
    let CollectiveSpec::SampleSort(ss) = spec else {
        unreachable!("the registry hands a sample sort spec to sample_sort::build");
    };
    if let Start::Root(data) = &start {
        if !data.is_empty() {
            return Err(format!(
                "a sample sort takes no data from its initiator ({} bytes given): every \
                 member's records are its local input",
                data.len()
            ));
        }
    }
    let members: Vec<NodeId> = ctx.members.iter().map(|(n, _)| *n).collect();
    let m = SampleSort::new(ctx.me, &members, ctx.transfer, ss, ctx.local_input.clone())?;
    let neighbours = members.into_iter().filter(|&n| n != ctx.me).collect();
    Ok(Built {
        machine: Box::new(m),
        neighbours,
    })
}
