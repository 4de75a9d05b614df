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
//!    [`MAX_BUCKET_PAYLOAD`] bytes, `more` set on all but the last. With
//!    [`SampleSortSpec::compress`] the buckets for other clusters are first compressed, one
//!    LZ4 block per frame, in a compute task (task 3, [`crate::sort_zip`]), and the merge's
//!    task decompresses them.
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
//! | 3    | `ssort_zbucket` | as `ssort_bucket`, then raw_len u32        | one LZ4 block of `raw_len` bytes of such records |
//!
//! `validate` refuses a zero record length, a payload that is not whole records, more samples
//! than the count, a flag other than 0 or 1, and a compressed bucket whose raw length is not
//! whole records (or above a frame's) or whose payload is empty. A compressed payload that
//! does not decompress to its raw length aborts the run, naming its sender
//! ([`AbortReason::CorruptPayload`]).

use crate::app::Job;
use crate::collective::{BuildContext, Built, CollectiveSpec, Start};
use crate::frame::{Family, FrameError, KindLayout, Message, MessageKind, TransferId};
use crate::node::{
    AbortReason, Command, ComputeTask, Input, Output, Outputs, Protocol, ProtocolError, Status,
    TaskId,
};
use crate::sort_zip::{self, Compress};
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
const K_ZBUCKET: u8 = 3;
const TASK_SORT: TaskId = TaskId(1);
const TASK_MERGE: TaskId = TaskId(2);
const TASK_ZIP: TaskId = TaskId(3);

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
        /// `Some(n)`: `records` is one LZ4 block of `n` bytes of records (kind
        /// `ssort_zbucket`, see [`crate::sort_zip`]); None: the records as they are.
        packed: Option<u32>,
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
        KindLayout {
            kind: K_ZBUCKET,
            name: "ssort_zbucket",
            fixed: 11,
            payload: true,
        },
    ];

    fn kind(&self) -> u8 {
        match self {
            SsortMsg::Samples { .. } => K_SAMPLES,
            SsortMsg::Bucket { packed: None, .. } => K_BUCKET,
            SsortMsg::Bucket {
                packed: Some(_), ..
            } => K_ZBUCKET,
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
                record_len,
                more,
                packed,
                ..
            } => {
                dst.put_u16(*record_len);
                dst.put_u8(u8::from(*more));
                if let Some(n) = packed {
                    dst.put_u32(*n);
                }
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
            K_BUCKET | K_ZBUCKET => {
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
                let packed = (kind == K_ZBUCKET).then(|| body.get_u32());
                SsortMsg::Bucket {
                    transfer,
                    record_len,
                    records: body,
                    more,
                    packed,
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
        if let SsortMsg::Bucket {
            packed: Some(n), ..
        } = self
        {
            return crate::sort_zip::check_packed(k, *n, payload.len(), len, MAX_BUCKET_PAYLOAD);
        }
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
    /// How bucket frames to other clusters travel ([`crate::sort_zip`]; default raw).
    #[serde(default, skip_serializing_if = "Compress::is_none")]
    pub compress: Compress,
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
            compress: Compress::None,
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
    /// Splitters known; the buckets for other clusters are being compressed.
    Zipping,
    Exchanging,
    Merging,
    Over,
}

/// One bucket's frames: (raw length if compressed, payload) each.
type Frames = Vec<(Option<u32>, Bytes)>;

/// One member of a sample sort run: see the [module docs](self).
///
/// Timers, randomness: none. Compute tasks: 1 (the local sort), 2 (the merge) and 3 (the
/// compression of the buckets for other clusters).
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
    /// The sort or merge in progress: the records, or a compressed frame that did not
    /// decompress (the sender's rank and the error).
    job: Option<Job<Result<Bytes, usize>>>,
    compress: Compress,
    /// Each member's cluster by rank, as an index (empty: unknown; see
    /// [`SampleSort::with_clusters`]).
    cluster_of: Vec<usize>,
    /// While zipping: each rank's bucket, and the job compressing those for other clusters.
    outgoing: Vec<Bytes>,
    zip: Option<Job<Vec<Frames>>>,
    /// Each rank's compressed frames for this node (raw length, LZ4 block).
    packed: Vec<Vec<(u32, Bytes)>>,
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
            compress: spec.compress,
            cluster_of: Vec::new(),
            outgoing: Vec::new(),
            zip: None,
            packed: vec![Vec::new(); p],
            phase: Phase::Idle,
            status: Status::Running,
            samples: vec![None; p],
            buckets: vec![(Vec::new(), false); p],
            splitters: Vec::new(),
        })
    }

    /// Tells the machine each member's cluster (`members`: every member's id and cluster, as
    /// the Host's build context gives them): with compression, only frames to other clusters
    /// are compressed. Call before the run starts.
    pub fn with_clusters<C: PartialEq + Copy>(mut self, members: &[(NodeId, C)]) -> SampleSort {
        let mut seen: Vec<C> = Vec::new();
        let mut of = Vec::with_capacity(self.ids.len());
        for id in &self.ids {
            let Some(&(_, c)) = members.iter().find(|(n, _)| n == id) else {
                return self;
            };
            let i = seen.iter().position(|&x| x == c).unwrap_or_else(|| {
                seen.push(c);
                seen.len() - 1
            });
            of.push(i);
        }
        self.cluster_of = of;
        self
    }

    /// Whether frames to rank `q` are compressed: compression is on and `q` is in another
    /// cluster (or the clusters are unknown).
    fn zipped_to(&self, q: usize) -> bool {
        self.compress != Compress::None
            && q != self.rank
            && (self.cluster_of.is_empty() || self.cluster_of[q] != self.cluster_of[self.rank])
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
        let job = Job::new(move || Ok(sort_packed(&parts, record_len)));
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
        let mut buckets = Vec::with_capacity(self.p());
        for q in 0..self.p() {
            let end = match self.splitters.get(q) {
                Some(sp) => upper_bound(&data, len, start, sp),
                None => n,
            };
            // Zero-copy: a bucket is a contiguous range of the packed, sorted records.
            buckets.push(data.slice(start * len..end * len));
            start = end;
        }
        self.buckets[self.rank] = (vec![buckets[self.rank].clone()], true);
        let zipped: Vec<usize> = (0..self.p()).filter(|&q| self.zipped_to(q)).collect();
        let zip_bytes: usize = zipped.iter().map(|&q| buckets[q].len()).sum();
        if zip_bytes == 0 {
            self.send_buckets(buckets, Vec::new(), out);
            return;
        }
        // Compressing is heavy: a compute task, off the event loop (see crate::app).
        let per_frame = self.per_frame();
        let raw = buckets.clone();
        let job = Job::new(move || {
            (0..raw.len())
                .map(|q| match zipped.contains(&q) {
                    true => frames(&raw[q], per_frame)
                        .into_iter()
                        .map(sort_zip::pack)
                        .collect(),
                    false => Vec::new(),
                })
                .collect()
        });
        out.push(Output::Compute(ComputeTask {
            task: TASK_ZIP,
            offset: 0,
            len: sort_zip::compress_cost(zip_bytes),
            data: Vec::new(),
            work: Some(job.work()),
        }));
        self.zip = Some(job);
        self.outgoing = buckets;
        self.phase = Phase::Zipping;
    }

    /// Bytes of records in one bucket frame: whole records, at least one.
    fn per_frame(&self) -> usize {
        (MAX_BUCKET_PAYLOAD / self.record_len).max(1) * self.record_len
    }

    /// Sends every other rank its bucket (`zipped[q]`: its frames compressed, empty: raw),
    /// even an empty one, and starts the merge if every bucket is in.
    fn send_buckets(&mut self, buckets: Vec<Bytes>, zipped: Vec<Frames>, out: &mut Outputs) {
        let per_frame = self.per_frame();
        for (q, bucket) in buckets.iter().enumerate() {
            if q == self.rank {
                continue;
            }
            let fs: Frames = match zipped.get(q) {
                Some(z) if !z.is_empty() => z.clone(),
                _ => frames(bucket, per_frame)
                    .into_iter()
                    .map(|f| (None, f))
                    .collect(),
            };
            let last = fs.len() - 1;
            for (i, (packed, records)) in fs.into_iter().enumerate() {
                out.send(
                    self.ids[q],
                    Message::SampleSort(SsortMsg::Bucket {
                        transfer: self.transfer,
                        record_len: self.record_len as u16,
                        records,
                        more: i < last,
                        packed,
                    }),
                );
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
        let packed: Vec<(usize, u32, Bytes)> = self
            .packed
            .iter_mut()
            .enumerate()
            .flat_map(|(q, z)| std::mem::take(z).into_iter().map(move |(n, b)| (q, n, b)))
            .collect();
        self.phase = Phase::Merging;
        if packed.is_empty() {
            self.sort_job(TASK_MERGE, range, out);
            return;
        }
        let unpacked: usize = packed.iter().map(|(_, n, _)| *n as usize).sum();
        let len = range.iter().map(|p| p.len()).sum::<usize>() + unpacked;
        let record_len = self.record_len;
        let job = Job::new(move || {
            for (q, n, z) in packed {
                range.push(sort_zip::unpack(n, &z).map_err(|_| q)?);
            }
            Ok(sort_packed(&range, record_len))
        });
        out.push(Output::Compute(ComputeTask {
            task: TASK_MERGE,
            offset: 0,
            len: len as u64 + sort_zip::decompress_cost(unpacked),
            data: Vec::new(),
            work: Some(job.work()),
        }));
        self.job = Some(job);
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
            SsortMsg::Bucket {
                records,
                more,
                packed,
                ..
            } => {
                if self.buckets[q].1 {
                    return Err(unexpected("bucket records after the member's last frame"));
                }
                match packed {
                    // Decompressed in the merge's task, off the event loop.
                    Some(n) => self.packed[q].push((n, records)),
                    None if !records.is_empty() => self.buckets[q].0.push(records),
                    None => {}
                }
                self.buckets[q].1 = !more;
                self.try_merge(out);
            }
        }
        Ok(())
    }
}

/// `bucket` cut into frames of at most `per_frame` bytes (at least one frame, maybe empty).
fn frames(bucket: &Bytes, per_frame: usize) -> Vec<Bytes> {
    if bucket.is_empty() {
        return vec![Bytes::new()];
    }
    (0..bucket.len())
        .step_by(per_frame)
        .map(|at| bucket.slice(at..(at + per_frame).min(bucket.len())))
        .collect()
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
                        self.data = sorted().expect("the local sort's job").expect("no frames");
                        self.sampled(out)
                    }
                    (Phase::Zipping, TASK_ZIP) => {
                        let zipped = self.zip.take().and_then(|j| j.result());
                        let buckets = std::mem::take(&mut self.outgoing);
                        self.send_buckets(buckets, zipped.expect("the zip's job"), out)
                    }
                    (Phase::Merging, TASK_MERGE) => match sorted().expect("the merge's job") {
                        Ok(data) => {
                            self.data = data;
                            self.finish(out)
                        }
                        Err(q) => {
                            self.phase = Phase::Over;
                            self.status = Status::Aborted;
                            out.push(Output::Aborted(AbortReason::CorruptPayload {
                                peer: self.ids[q],
                                kind: kind_of(K_ZBUCKET),
                            }));
                        }
                    },
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
    let m = SampleSort::new(ctx.me, &members, ctx.transfer, ss, ctx.local_input.clone())?
        .with_clusters(&ctx.members);
    let neighbours = members.into_iter().filter(|&n| n != ctx.me).collect();
    Ok(Built {
        machine: Box::new(m),
        neighbours,
    })
}
