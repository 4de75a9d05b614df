//! HeteroSort as a collective (Yang et al., issue 19 point 2): every member starts with its own
//! fixed-length records and ends with a sorted, contiguous range of the whole set, members
//! numbered in snake order over an `R x C` conceptual torus ([`windrose_trees::heterosort`]).
//!
//! # A cycle
//! Member `i` (its position in the group's id order) is snake rank `i` of the torus. In cycle
//! `c` (from 1; odd and even as the paper's Table 1) a node:
//! 1. hands the records of last cycle's load decision to its sequence partner (a *handoff*, see
//!    below), then cuts its sorted records into one slice per entry of its trading list
//!    ([`Torus::trading_list`] for the cycle's parity), slice sizes in proportion to the list
//!    entries' weights (all 1 for the paper's equal slices, the members' speeds for
//!    [`Slicing::Speed`]). The slice for this cycle's *matched* sequence partner (ranks
//!    `(2k, 2k+1)` in odd cycles, `(2k+1, 2k+2)` in even ones) is taken from the boundary
//!    (the top records for the partner above, the bottom ones for the partner below, at least
//!    one record); the others are cut from the rest in list order, as the paper does;
//! 2. sends each partner its slice ([`HsortMsg::Slice`] frames of at most
//!    [`MAX_SLICE_PAYLOAD`] bytes each, `more` set on all but the last; the handoff records
//!    first);
//! 3. once every partner's slice of the cycle is in: for each partner, merges the slice it sent
//!    with the one it received; the lower-ranked node keeps the lowest records, as many as it
//!    sent, the higher the rest. Both ends compute the same split, so one frame each way is the
//!    whole trade. Its kept slice, the kept halves and the handoff records, sorted, are its
//!    records for the next cycle. The merge is the cycle's compute task ([`Output::Compute`]
//!    with a [`Job`]: the real driver runs it off the Host's event loop, so a slow node keeps
//!    answering heartbeats; the simulator charges it by the node's speed, see [`crate::app`]).
//!    Each epoch's records are sorted the same way before its cycle 1;
//! 4. decides with its matched partner how many records cross their boundary next cycle (the
//!    load decision): both know both counts (each frame carries its sender's count), and the
//!    lower node's target is the integer `x` in `1..=T-1` minimising `x^2 / w_lo + (T-x)^2 /
//!    w_hi` (`T` the pair's records, `w` their weights), the current split when it is one of
//!    the minima. The records cross in the next cycle's frame: the lower node's top ones or
//!    the upper node's bottom ones.
//!
//! Every record takes part in at most one trade per cycle, so counts change only by handoffs,
//! and a node never becomes empty (a target is at least 1 on both sides, and an empty input
//! share is refused at build time).
//!
//! # Termination: a wave along the snake
//! After its cycle `c` (merge and compute done) rank 0 sends `Check { c, ok: true, max }` to
//! rank 1 (its largest record); rank `i` waits for its own cycle `c` and rank `i-1`'s check,
//! and sends on `ok && max <= its smallest record` with the larger of the two maxima. Rank
//! `R*C - 1` so decides whether the records after cycle `c` are sorted along the snake, and
//! sends `Verdict { c, sorted }` back down the snake, each rank forwarding it at once. A node
//! starts cycle `c + 2` only once it knows verdict `c` is "not sorted", and rank 0 starts the
//! wave of cycle `c` only then for verdict `c - 1`, so waves never overlap and one cycle of
//! trading overlaps each wave. On verdict `c` "sorted" every node finishes cycle `c + 1` (which
//! every node has started or may start: it needed only verdict `c - 1`) and then ends in two
//! phases ([recovery](recovery#the-end-prepare-ready-commit)): it tells rank `R*C - 1`, the
//! *decider*, that it holds its final range ([`HsortMsg::Ready`]), and delivers its records in
//! order ([`Output::Deliver`] at offset 0) and finishes when the decider's
//! [`HsortMsg::Commit`] comes, which the decider sends once every rank's Ready is in. No check
//! or verdict of the last cycle is ever sent; after a node has finished only other ranks'
//! copies of the commit (each rank passes it on) can still arrive, and a finished machine
//! ignores them.
//!
//! **It cannot stop early.** The records "after cycle `c`" are a consistent cut: each node's
//! records after its merge of cycle `c`, and cycle `c + 1`'s frames are cut from exactly those.
//! A prefix maximum below every later minimum is sortedness of the concatenation (the nodes
//! are never empty). And sortedness is kept by every later cycle: view the set as one sequence
//! (ranks in snake order, each node's records sorted). A trade between ranks `a < b` moves the
//! smaller records to `a` and a node's merge sorts its own range: both are compare-exchanges
//! that put the smaller value at the lower position, which never adds an inversion; a handoff
//! only moves the boundary between two neighbours without reordering the sequence. A sorted
//! sequence has no inversion, so it stays sorted through cycle `c + 1`.
//!
//! **It cannot run forever.** Let `I` be the number of inversions of the sequence and
//! `L = sum_i count_i^2 * W / w_i` (`W` the product of the weights, an integer). `I` never
//! grows (above), and every nonzero handoff lowers `L` strictly (it moves a pair from a
//! non-minimum of its convex cost to a minimum, the other counts unchanged). If in two
//! consecutive cycles no handoff is decided and no trade swaps anything, the state is unchanged
//! through both parities; were it unsorted, some pair of snake neighbours `(i, i+1)` would have
//! `max_i > min_{i+1}` (no node is empty), and in the cycle of their parity the boundary slices
//! they trade hold exactly those two records, which would swap. So every two cycles lower `I`
//! or `L`, both non-negative integers: a run ends after at most `2 (I_0 + L_0) + 3` cycles (the
//! `+3`: the verdict lags one cycle). The bound is loose; the measured cycles are in the tests.
//!
//! # Why the boundary slice
//! The paper's lists send the extreme slices over the express (transcoil and transedge)
//! pathways, which moves badly placed data far in one cycle; but with the lists alone a set
//! can stall unsorted (every traded pair already in order while a neighbour pair is not). The
//! matched sequence partner's boundary slice is odd-even transposition along the snake, the
//! step the proof above needs.
//!
//! # Splitters: one exchange, then one wave
//! The paper's cycles move most of every node's records in every cycle, and take about `N`
//! cycles, each with a check wave across the WAN: on the heterogeneous testbed (16 nodes,
//! 256 MB) speed slices were 27x slower than the sample sort. [`Slicing::Splitters`] keeps the
//! torus, the snake order, the backups, the epochs and the check wave, but moves each record
//! about once:
//! 1. **Sample, unsorted.** At the epoch's start every member sends every live member its
//!    count and `s = min(count, 8 p)` samples ([`HsortMsg::Samples`], kind 7): regular samples
//!    of a sorted pool of `32 s` records taken at regular positions of its records, which it
//!    has not sorted ([`SAMPLE_POOL`]; weights as regular samples in [`crate::sample_sort`]).
//!    Nothing is sorted before the exchange: an equal input share sorted first held the whole
//!    exchange back until the slowest member had sorted it (on the testbed, 4 s of 35 s).
//! 2. **Weighted splitters.** With every live member's samples in, each member computes the same `p - 1` splitters
//!    ([`weighted_splitters`](crate::sample_sort::weighted_splitters)): snake rank `j`'s range
//!    gets about `w_j / sum w` of the records (`w` the members' speeds), so a 0.05-core node
//!    gets a quarter of what a 0.2-core node gets. The speeds are [`HsortSpec::speeds`]; a
//!    spec that weighs but names none takes, at the initiator's Host, the compute speeds its
//!    group view measured (the members time their computes and share them with their
//!    weather rows), so every member weighs with the same numbers. The member then groups its records by
//!    bucket (one pass, binary search among the splitters; a compute task off the event
//!    loop), so each bucket is a contiguous run of its records, unsorted.
//! 3. **The exchange is cycle 1.** Its partners are all the other ranks: each gets its bucket
//!    (possibly empty) in ordinary [`HsortMsg::Slice`] frames (cycle 1, no handoff), the
//!    buckets for other clusters queued first (given the clusters, see
//!    [`HeteroSort::with_clusters`]). A receiver sorts what has arrived while the rest is on its
//!    way: whenever no compute task runs, the records that came since the last one (and its
//!    own bucket) are sorted into a *run* (a compute task); once every bucket is in, the last
//!    of them are sorted and all runs merged (a k-way merge) into its range, the cycle's
//!    compute task. So the sorting is spread over the exchange, done by each range's owner in
//!    proportion to its speed, and after the last frame only one run's sort and the merge are
//!    left. No load decision is made: the splitters are the balance. With
//!    [`HsortSpec::compress`] the buckets for other clusters are first compressed in a compute
//!    task ([`crate::sort_zip`]) and travel as `hsort_zslice` frames; each run's task
//!    decompresses what it sorts.
//! 4. **One check confirms it.** Instead of a wave through the snake (`2p` hops, each through
//!    a node that may be waiting for its CPU quota), every rank sends its smallest and largest
//!    record after cycle 1 straight to the last rank ([`HsortMsg::Check`] whose payload is the
//!    two records, or none for a rank without records), which checks them in snake order and
//!    sends every rank the [`HsortMsg::Verdict`]: two hops. Buckets are cut at the same splitters
//!    everywhere, a record `<=` splitter `j` going to rank `j` or below, so every rank's
//!    records are `<=` the next non-empty rank's: the verdict of cycle 1 is "sorted", and it
//!    is the *prepare* of the two-phase end: every rank answers Ready and delivers on the
//!    decider's commit ([recovery](recovery#the-end-prepare-ready-commit)), so a member that
//!    fails after its check is never missed. The backup copies travel beside the samples and the exchange
//!    (the paper's modes wait for them before trading): a node sends its check only once
//!    its own copies are acknowledged, so no verdict, and no delivery, comes before every
//!    copy is placed, and [recovery](recovery#splitters-trade-before-the-copies-are-placed)
//!    covers the same span. No cycle starts before the verdict of the one before (unlike
//!    the paper's mode, which overlaps one cycle), so nothing is traded after the exchange.
//!    Were a verdict ever "not sorted", the paper's cycles with speed slices would run from
//!    cycle 2 under the same rule until one is "sorted"; their termination argument assumes
//!    no node is empty, which the splitters do not promise, so that branch is a safety net,
//!    not a path the argument covers.
//!
//! A failure starts a new epoch as in every mode ([`recovery`]): the survivors restore the
//! failed members' inputs, sort, sample and exchange again on the survivors' snake. Samples
//! carry their epoch and are dropped, refused or kept like the cycle frames.
//!
//! Cost: one pass grouping by bucket per member, `p (p - 1)` sample frames, one bucket per
//! ordered pair (each record crosses the network at most once, plus its backup copy), the
//! runs' sorts and one merge per member, one check (two hops), and the end: one Ready per rank
//! and one commit per ordered pair (the decider's, passed on by each rank), small frames, two
//! more hops. In the simulator on the testbed's shape (4 clusters of 0.05 / 0.05 / 0.1 / 0.2 of
//! a 100 MB/s core, 4 MB/s WAN, 16 MB of records;
//! `windrose-sim/tests/heterosort.rs::splitters_meet_the_speed_targets_on_the_heterogeneous_testbed`)
//! the splitters finish at 0.593 s against 4.823 s for equal slices (8.1x) and 0.793 s for the
//! sample sort (1.34x; the issue asks 1.5x). Sorting each member's input before the exchange
//! (0.698 s) made every member wait for the slowest member to sort an equal share; now the
//! range owners sort, in proportion to their speeds, while the exchange runs. The simulator
//! charges the grouping pass, each run and the merge by their bytes, as it charges a sort.
//! Earlier choices: backup copies stay inside their owner's cluster
//! ([`recovery::holders_by_cluster`]; the plain rule sent each cluster's last member's copy
//! over the WAN beside the exchange), and the check is two hops instead of a `2p`-hop wave.
//!
//! On the real testbed the floor is the WAN: at 1 GiB each cluster sends a quarter of its
//! 262 MB to each other cluster, 65.5 MB over links of 3-5 MB/s, 21.8 s on the slowest before
//! TCP's headers; the sample sort's exchange alone took about 24 s there. See the README's
//! HeteroSort section for the measured runs.
//!
//! No choice of ranges lowers that floor by much. With uniform keys every cluster holds a
//! quarter of every range, so three quarters of the set cross the WAN whatever the ranges;
//! only how they split over the links moves. Cluster 0's links carry 3.5 + 3 + 3 = 9.5 MB/s
//! each way, and it must send the part of its quarter outside its range and receive the
//! other clusters' part inside it: at best (range 1/4) 196.6 MB each way, 20.7 s at 1 GiB and
//! 5.17 s at 256 MB, even with relays through faster clusters (without them, ranges in
//! proportion to each cluster's slowest inbound link, 0.24 / 0.28 / 0.24 / 0.24, give 21.0 s
//! and 5.24 s). The issue's 1.5x over the sample sort (34.8 s and 7.28 s measured) asks for
//! 23.2 s and 4.86 s: below the floor at 256 MB, and at 1 GiB 2.5 s above it (1.6 s after
//! TCP/IP headers, 1514 bytes on the wire per 1448), with every WAN link full from the first
//! byte to the last and 1.6 s left for all the exchange cannot overlap. So ranges sized by bandwidth gain at most 4 % on
//! this testbed and are not built; speeds decide the ranges inside a cluster.
//!
//! # Steps reported
//! The machine notes when it passes each named step ([`Protocol::phases`], at the `now` of the
//! input that took it there; a step passed again in a later epoch keeps its latest time):
//! `samples_sent`, `splitters` (every sample in; the grouping pass starts), `exchange_start`
//! (grouped, the buckets cut), `zipped` (with compression: the buckets for other clusters
//! compressed and queued), `copies_placed`, `exchange_end` (every bucket in; the last
//! run's sort and the merge start), `merged` (each cycle's compute done), `check_sent`,
//! `ready` and `commit`. Its Host sends them with its end to the initiator, which
//! `windrose sort --json` prints per member.
//!
//! # Frames (family 7)
//!
//! | kind | name               | fixed fields                                                | payload |
//! |------|--------------------|-------------------------------------------------------------|---------|
//! | 1    | `hsort_slice`      | transfer u32, epoch u32, cycle u32, count u64, record_len u16, handoff u32, more u8 | the handoff records, then the slice |
//! | 2    | `hsort_check`      | transfer u32, epoch u32, cycle u32, ok u8                   | the prefix maximum (one record, or none) |
//! | 3    | `hsort_verdict`    | transfer u32, epoch u32, cycle u32, sorted u8               | none    |
//! | 4    | `hsort_backup`     | transfer u32, record_len u16, more u8                       | input records (a backup copy) |
//! | 5    | `hsort_backup_ack` | transfer u32                                                | none    |
//! | 6    | `hsort_failed`     | transfer u32                                                | the failed member ranks, u32 each, ascending |
//! | 7    | `hsort_samples`    | transfer u32, epoch u32, count u64, record_len u16          | the sender's regular samples, in order ([`Slicing::Splitters`]) |
//! | 8    | `hsort_ready`      | transfer u32, epoch u32, cycle u32                          | none (to the decider: the sender holds its final range; to another rank: the sender is prepared and lost the decider) |
//! | 9    | `hsort_commit`     | transfer u32, epoch u32, cycle u32                          | none    |
//! | 10   | `hsort_zslice`     | as `hsort_slice`, then raw_len u32                          | one LZ4 block of `raw_len` bytes of records, no handoff ([`crate::sort_zip`]; the splitters' exchange only) |
//!
//! `count` is the sender's record count after the cycle's handoffs; `validate` refuses a
//! zero cycle, a zero record length, a payload that is not whole records or shorter than the
//! handoff, a compressed slice whose raw length is not whole records (or above a frame's),
//! whose payload is empty or that carries a handoff, flags other than 0 or 1, a failure notice that is empty, not whole u32s or not
//! strictly ascending, and more samples than the count (or none of a nonempty share).
//!
//! # Failures
//! With [`HsortSpec::backups`] above 0 (the default is 1) every member's input is copied to
//! the next members along the snake before it trades, and a failure starts a new *epoch*: the
//! survivors agree on the failed set, restore the failed members' inputs from the copies, and
//! sort again from the inputs on a snake of the survivors. The design and the argument that no
//! record is lost or duplicated are in [`recovery`].

use crate::app::Job;
use crate::frame::{
    inconsistent, Family, FrameError, KindLayout, Message, MessageKind, TransferId,
};
use crate::node::{
    AbortReason, Command, ComputeTask, Input, Output, Outputs, Protocol, ProtocolError, Status,
    TaskId,
};
use crate::sort_zip::{self, Compress};
use crate::time::Time;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use windrose_model::NodeId;
use windrose_trees::heterosort::{weighted_slices, Cycle, Torus};

pub mod recovery;

/// The largest payload of one slice frame (whole records, at least one): a slice larger than
/// this travels in several frames, well within any receiver's frame limit.
pub const MAX_SLICE_PAYLOAD: usize = 1 << 20;

const K_SLICE: u8 = 1;
const K_CHECK: u8 = 2;
const K_VERDICT: u8 = 3;
const K_BACKUP: u8 = 4;
const K_BACKUP_ACK: u8 = 5;
const K_FAILED: u8 = 6;
const K_SAMPLES: u8 = 7;
const K_READY: u8 = 8;
const K_COMMIT: u8 = 9;
const K_ZSLICE: u8 = 10;

/// A HeteroSort message: see the frame table in the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HsortMsg {
    /// A cycle's trade with one partner.
    Slice {
        /// The run.
        transfer: TransferId,
        /// The epoch: how many members the sender counts as failed (see [`recovery`]).
        epoch: u32,
        /// The cycle (from 1).
        cycle: u32,
        /// The sender's records after the cycle's handoffs.
        count: u64,
        /// Bytes per record.
        record_len: u16,
        /// Records at the start of `records` that change owner (the load decision).
        handoff: u32,
        /// The handoff records, then the slice to merge, `record_len` bytes each.
        records: Bytes,
        /// More frames of this slice follow.
        more: bool,
        /// `Some(n)`: `records` is one LZ4 block of `n` bytes of records, no handoff (kind
        /// `hsort_zslice`, only in the splitters' exchange, see [`crate::sort_zip`]); None:
        /// the records as they are.
        packed: Option<u32>,
    },
    /// The termination wave towards the top of the snake.
    Check {
        /// The run.
        transfer: TransferId,
        /// The epoch.
        epoch: u32,
        /// The cycle whose records are checked.
        cycle: u32,
        /// Sorted so far (from rank 0 to the sender).
        ok: bool,
        /// The largest record so far (empty: none).
        max: Bytes,
    },
    /// The decision, back down the snake.
    Verdict {
        /// The run.
        transfer: TransferId,
        /// The epoch.
        epoch: u32,
        /// The cycle decided.
        cycle: u32,
        /// The records after that cycle are sorted.
        sorted: bool,
    },
    /// A backup copy of the sender's input, for one of its backup holders.
    Backup {
        /// The run.
        transfer: TransferId,
        /// Bytes per record.
        record_len: u16,
        /// Input records, `record_len` bytes each.
        records: Bytes,
        /// More frames of this copy follow.
        more: bool,
    },
    /// The whole backup copy arrived: the owner may trade its records.
    BackupAck {
        /// The run.
        transfer: TransferId,
    },
    /// The sender's record count and regular samples, for the splitters of
    /// [`Slicing::Splitters`].
    Samples {
        /// The run.
        transfer: TransferId,
        /// The epoch.
        epoch: u32,
        /// The sender's records in the epoch.
        count: u64,
        /// Bytes per record.
        record_len: u16,
        /// The samples, `record_len` bytes each, in order.
        samples: Bytes,
    },
    /// The two-phase end ([`recovery`]'s "The end"): the sender holds its final range of the
    /// epoch and has heard of no failure; it waits for the decider's commit.
    Ready {
        /// The run.
        transfer: TransferId,
        /// The epoch.
        epoch: u32,
        /// The sender's last cycle.
        cycle: u32,
    },
    /// The decider had every rank's [`HsortMsg::Ready`] and no failure: deliver and finish.
    Commit {
        /// The run.
        transfer: TransferId,
        /// The epoch.
        epoch: u32,
        /// The last cycle.
        cycle: u32,
    },
    /// The members the sender counts as failed (ascending member ranks, all it knows of).
    Failed {
        /// The run.
        transfer: TransferId,
        /// Member ranks (id order), ascending, as big-endian u32s ([`HsortMsg::failed`],
        /// [`failed_ranks`]).
        ranks: Bytes,
    },
}

/// The ranks of a [`HsortMsg::Failed`] payload (validated: whole, strictly ascending).
pub fn failed_ranks(ranks: &Bytes) -> Vec<usize> {
    ranks
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect()
}

fn kind_of(kind: u8) -> MessageKind {
    MessageKind::of::<HsortMsg>(kind)
}

impl HsortMsg {
    /// The run the message belongs to.
    pub fn run(&self) -> TransferId {
        match self {
            HsortMsg::Slice { transfer, .. }
            | HsortMsg::Check { transfer, .. }
            | HsortMsg::Verdict { transfer, .. }
            | HsortMsg::Backup { transfer, .. }
            | HsortMsg::BackupAck { transfer }
            | HsortMsg::Samples { transfer, .. }
            | HsortMsg::Ready { transfer, .. }
            | HsortMsg::Commit { transfer, .. }
            | HsortMsg::Failed { transfer, .. } => *transfer,
        }
    }

    /// The epoch of a message that carries one.
    pub fn epoch(&self) -> Option<u32> {
        match self {
            HsortMsg::Samples { epoch, .. } => Some(*epoch),
            _ => self.cycle().map(|(e, _)| e),
        }
    }

    /// The failure notice naming `ranks` (ascending).
    pub fn failed(transfer: TransferId, ranks: &[usize]) -> HsortMsg {
        let mut b = BytesMut::with_capacity(4 * ranks.len());
        for &r in ranks {
            b.put_u32(r as u32);
        }
        HsortMsg::Failed {
            transfer,
            ranks: b.freeze(),
        }
    }

    /// The (epoch, cycle) of a cycle's message; `None` for the backup and failure kinds.
    pub fn cycle(&self) -> Option<(u32, u32)> {
        match self {
            HsortMsg::Slice { epoch, cycle, .. }
            | HsortMsg::Check { epoch, cycle, .. }
            | HsortMsg::Verdict { epoch, cycle, .. }
            | HsortMsg::Ready { epoch, cycle, .. }
            | HsortMsg::Commit { epoch, cycle, .. } => Some((*epoch, *cycle)),
            _ => None,
        }
    }
}

impl Family for HsortMsg {
    const FAMILY: u8 = 7;
    const KINDS: &'static [KindLayout] = &[
        KindLayout {
            kind: K_SLICE,
            name: "hsort_slice",
            fixed: 27,
            payload: true,
        },
        KindLayout {
            kind: K_CHECK,
            name: "hsort_check",
            fixed: 13,
            payload: true,
        },
        KindLayout {
            kind: K_VERDICT,
            name: "hsort_verdict",
            fixed: 13,
            payload: false,
        },
        KindLayout {
            kind: K_BACKUP,
            name: "hsort_backup",
            fixed: 7,
            payload: true,
        },
        KindLayout {
            kind: K_BACKUP_ACK,
            name: "hsort_backup_ack",
            fixed: 4,
            payload: false,
        },
        KindLayout {
            kind: K_FAILED,
            name: "hsort_failed",
            fixed: 4,
            payload: true,
        },
        KindLayout {
            kind: K_SAMPLES,
            name: "hsort_samples",
            fixed: 18,
            payload: true,
        },
        KindLayout {
            kind: K_READY,
            name: "hsort_ready",
            fixed: 12,
            payload: false,
        },
        KindLayout {
            kind: K_COMMIT,
            name: "hsort_commit",
            fixed: 12,
            payload: false,
        },
        KindLayout {
            kind: K_ZSLICE,
            name: "hsort_zslice",
            fixed: 31,
            payload: true,
        },
    ];

    fn kind(&self) -> u8 {
        match self {
            HsortMsg::Slice { packed: None, .. } => K_SLICE,
            HsortMsg::Slice {
                packed: Some(_), ..
            } => K_ZSLICE,
            HsortMsg::Check { .. } => K_CHECK,
            HsortMsg::Verdict { .. } => K_VERDICT,
            HsortMsg::Backup { .. } => K_BACKUP,
            HsortMsg::BackupAck { .. } => K_BACKUP_ACK,
            HsortMsg::Failed { .. } => K_FAILED,
            HsortMsg::Samples { .. } => K_SAMPLES,
            HsortMsg::Ready { .. } => K_READY,
            HsortMsg::Commit { .. } => K_COMMIT,
        }
    }

    fn transfer(&self) -> Option<TransferId> {
        Some(self.run())
    }

    fn payload(&self) -> Option<&Bytes> {
        match self {
            HsortMsg::Slice { records, .. } | HsortMsg::Backup { records, .. } => Some(records),
            HsortMsg::Check { max, .. } => Some(max),
            HsortMsg::Failed { ranks, .. } => Some(ranks),
            HsortMsg::Samples { samples, .. } => Some(samples),
            HsortMsg::Verdict { .. }
            | HsortMsg::BackupAck { .. }
            | HsortMsg::Ready { .. }
            | HsortMsg::Commit { .. } => None,
        }
    }

    fn put_fixed(&self, dst: &mut BytesMut) {
        dst.put_u32(self.run().0);
        if let Some((epoch, cycle)) = self.cycle() {
            dst.put_u32(epoch);
            dst.put_u32(cycle);
        }
        match self {
            HsortMsg::Slice {
                count,
                record_len,
                handoff,
                more,
                packed,
                ..
            } => {
                dst.put_u64(*count);
                dst.put_u16(*record_len);
                dst.put_u32(*handoff);
                dst.put_u8(u8::from(*more));
                if let Some(n) = packed {
                    dst.put_u32(*n);
                }
            }
            HsortMsg::Check { ok, .. } => dst.put_u8(u8::from(*ok)),
            HsortMsg::Verdict { sorted, .. } => dst.put_u8(u8::from(*sorted)),
            HsortMsg::Backup {
                record_len, more, ..
            } => {
                dst.put_u16(*record_len);
                dst.put_u8(u8::from(*more));
            }
            HsortMsg::Samples {
                epoch,
                count,
                record_len,
                ..
            } => {
                dst.put_u32(*epoch);
                dst.put_u64(*count);
                dst.put_u16(*record_len);
            }
            HsortMsg::BackupAck { .. }
            | HsortMsg::Failed { .. }
            | HsortMsg::Ready { .. }
            | HsortMsg::Commit { .. } => {}
        }
    }

    fn parse(kind: u8, mut body: Bytes) -> Result<Self, FrameError> {
        let flag = |b: u8, k: u8| match b {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(FrameError::Invalid {
                kind: kind_of(k),
                what: format!("flag byte {b}, expected 0 or 1"),
            }),
        };
        let transfer = TransferId(body.get_u32());
        let msg = match kind {
            K_SLICE | K_ZSLICE => {
                let epoch = body.get_u32();
                let cycle = body.get_u32();
                let count = body.get_u64();
                let record_len = body.get_u16();
                let handoff = body.get_u32();
                let more = flag(body.get_u8(), kind)?;
                let packed = (kind == K_ZSLICE).then(|| body.get_u32());
                HsortMsg::Slice {
                    transfer,
                    epoch,
                    cycle,
                    count,
                    record_len,
                    handoff,
                    records: body,
                    more,
                    packed,
                }
            }
            K_CHECK => {
                let epoch = body.get_u32();
                let cycle = body.get_u32();
                let ok = flag(body.get_u8(), kind)?;
                HsortMsg::Check {
                    transfer,
                    epoch,
                    cycle,
                    ok,
                    max: body,
                }
            }
            K_VERDICT => {
                let epoch = body.get_u32();
                let cycle = body.get_u32();
                let sorted = flag(body.get_u8(), kind)?;
                HsortMsg::Verdict {
                    transfer,
                    epoch,
                    cycle,
                    sorted,
                }
            }
            K_BACKUP => {
                let record_len = body.get_u16();
                let more = flag(body.get_u8(), kind)?;
                HsortMsg::Backup {
                    transfer,
                    record_len,
                    records: body,
                    more,
                }
            }
            K_BACKUP_ACK => HsortMsg::BackupAck { transfer },
            K_READY | K_COMMIT => {
                let epoch = body.get_u32();
                let cycle = body.get_u32();
                if kind == K_READY {
                    HsortMsg::Ready {
                        transfer,
                        epoch,
                        cycle,
                    }
                } else {
                    HsortMsg::Commit {
                        transfer,
                        epoch,
                        cycle,
                    }
                }
            }
            K_SAMPLES => {
                let epoch = body.get_u32();
                let count = body.get_u64();
                let record_len = body.get_u16();
                HsortMsg::Samples {
                    transfer,
                    epoch,
                    count,
                    record_len,
                    samples: body,
                }
            }
            K_FAILED => HsortMsg::Failed {
                transfer,
                ranks: body,
            },
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
        if let Some((_, 0)) = self.cycle() {
            return Err(inconsistent(k, "cycle 0: cycles count from 1"));
        }
        let whole = |record_len: u16, records: &Bytes| {
            if record_len == 0 {
                return Err(inconsistent(k, "record length 0"));
            }
            let len = usize::from(record_len);
            if !records.len().is_multiple_of(len) {
                return Err(FrameError::Invalid {
                    kind: k,
                    what: format!(
                        "{} payload bytes are not whole records of {len} bytes",
                        records.len()
                    ),
                });
            }
            Ok(records.len() / len)
        };
        match self {
            HsortMsg::Slice {
                record_len,
                handoff,
                records,
                packed: Some(n),
                ..
            } => {
                if *record_len == 0 {
                    return Err(inconsistent(k, "record length 0"));
                }
                let len = usize::from(*record_len);
                crate::sort_zip::check_packed(k, *n, records.len(), len, MAX_SLICE_PAYLOAD)?;
                if *handoff != 0 {
                    return Err(inconsistent(k, "handoff records in a compressed slice"));
                }
            }
            HsortMsg::Slice {
                record_len,
                handoff,
                records,
                ..
            } => {
                let n = whole(*record_len, records)?;
                if (*handoff as usize) > n {
                    return Err(FrameError::Invalid {
                        kind: k,
                        what: format!(
                            "{handoff} handoff records but only {n} records in the payload"
                        ),
                    });
                }
            }
            HsortMsg::Backup {
                record_len,
                records,
                ..
            } => {
                whole(*record_len, records)?;
            }
            HsortMsg::Samples {
                count,
                record_len,
                samples,
                ..
            } => {
                let n = whole(*record_len, samples)?;
                if n as u64 > *count || (*count > 0 && n == 0) {
                    return Err(FrameError::Invalid {
                        kind: k,
                        what: format!("{n} samples of {count} records"),
                    });
                }
            }
            HsortMsg::Failed { ranks, .. } => {
                if ranks.is_empty() {
                    return Err(inconsistent(k, "no failed member named"));
                }
                if !ranks.len().is_multiple_of(4) {
                    return Err(FrameError::Invalid {
                        kind: k,
                        what: format!("{} payload bytes are not whole u32 ranks", ranks.len()),
                    });
                }
                let ranks = failed_ranks(ranks);
                if ranks.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(FrameError::Invalid {
                        kind: k,
                        what: format!("ranks {ranks:?} are not strictly ascending"),
                    });
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// How slices are sized.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Slicing {
    /// The paper's HeteroSort: equal slices and equal loads (the baseline).
    #[default]
    Equal,
    /// Slices and loads in proportion to the members' speeds (the paper's future work).
    #[serde(rename = "speeds", alias = "speed")]
    Speed,
    /// Speed-weighted splitters from samples and one exchange as cycle 1, then one check wave
    /// (see [Splitters](self#splitters-one-exchange-then-one-wave)); the paper's cycles with
    /// speed slices only if that wave finds the set unsorted.
    Splitters,
}

impl Slicing {
    /// Every slicing, in the order help texts list them.
    pub const ALL: [Slicing; 3] = [Slicing::Speed, Slicing::Equal, Slicing::Splitters];

    /// Its name in files, job messages and on the command line (its serde name).
    pub fn name(self) -> &'static str {
        match self {
            Slicing::Equal => "equal",
            Slicing::Speed => "speeds",
            Slicing::Splitters => "splitters",
        }
    }

    /// The slicing named `name` (or `speed`, the older spelling of `speeds`).
    pub fn from_name(name: &str) -> Option<Slicing> {
        match name.trim() {
            "speed" => Some(Slicing::Speed),
            n => Slicing::ALL.into_iter().find(|s| s.name() == n),
        }
    }
}

/// The parameters of a HeteroSort run
/// ([`CollectiveSpec::HeteroSort`](crate::collective::CollectiveSpec)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HsortSpec {
    /// Rows of the conceptual torus.
    pub rows: u32,
    /// Columns; `rows * cols` is the group size.
    pub cols: u32,
    /// Bytes per record (100 for the sort benchmark's records); records compare as bytes, so
    /// the key (a prefix) decides and the rest breaks ties.
    pub record_len: u32,
    /// Equal or speed-proportional slices.
    #[serde(default)]
    pub slicing: Slicing,
    /// Each member's relative speed, in member id order (empty: all equal). Used by
    /// [`Slicing::Speed`] and [`Slicing::Splitters`]; when empty, the Host that starts the
    /// sort fills in the compute speeds its group view measured, if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub speeds: Vec<f64>,
    /// Backup copies of each member's input, held by the next members in snake order (0: a
    /// failed member aborts the run). A run survives any failures that leave one of each
    /// failed member's holders alive: see [`recovery`].
    #[serde(default = "default_backups")]
    pub backups: u32,
    /// How the splitters' exchange frames to other clusters travel ([`crate::sort_zip`];
    /// default raw). The paper's cycles always trade raw records.
    #[serde(default, skip_serializing_if = "Compress::is_none")]
    pub compress: Compress,
}

fn default_backups() -> u32 {
    HsortSpec::DEFAULT_BACKUPS
}

/// Weights are integers so that the load decision is exact: speeds scaled to this maximum.
const WEIGHT_SCALE: f64 = 1e6;

impl HsortSpec {
    /// One copy: a run survives any single failure, and more when the failed members' holders
    /// live, for one extra transfer of the input.
    pub const DEFAULT_BACKUPS: u32 = 1;

    /// The squarest torus of `members` (rows <= cols, rows x cols = members): what a sort
    /// uses unless told otherwise.
    pub fn squarest_torus(members: usize) -> (u32, u32) {
        let rows = (1..=members)
            .take_while(|r| r * r <= members)
            .filter(|r| members.is_multiple_of(*r))
            .last()
            .unwrap_or(1);
        (rows as u32, (members / rows.max(1)) as u32)
    }

    /// The torus and every member's integer weight, checked against a group of `members`.
    pub fn check(&self, members: usize) -> Result<(Torus, Vec<u64>), String> {
        let torus =
            Torus::new(self.rows as usize, self.cols as usize).map_err(|e| e.to_string())?;
        if torus.len() != members {
            return Err(format!(
                "a {} x {} torus has {} nodes, the group has {members} members",
                self.rows,
                self.cols,
                torus.len()
            ));
        }
        if self.record_len == 0 || self.record_len > u32::from(u16::MAX) {
            return Err(format!(
                "record_len {} is out of range 1..={}",
                self.record_len,
                u16::MAX
            ));
        }
        if members > 1 && self.backups as usize >= members {
            return Err(format!(
                "{} backups for {members} members: at most {} (every other member)",
                self.backups,
                members - 1
            ));
        }
        if !self.speeds.is_empty() && self.speeds.len() != members {
            return Err(format!(
                "{} speeds given for {members} members",
                self.speeds.len()
            ));
        }
        if let Some((i, s)) = self
            .speeds
            .iter()
            .enumerate()
            .find(|(_, s)| !(s.is_finite() && **s > 0.0))
        {
            return Err(format!("speed {i} is {s}: must be finite and positive"));
        }
        let weights = match self.slicing {
            Slicing::Speed | Slicing::Splitters if !self.speeds.is_empty() => {
                let top = self.speeds.iter().copied().fold(0.0, f64::max);
                self.speeds
                    .iter()
                    .map(|s| ((s / top * WEIGHT_SCALE).round() as u64).max(1))
                    .collect()
            }
            _ => vec![1; members],
        };
        Ok((torus, weights))
    }
}

/// The load decision of a pair of snake neighbours: the lower node's record count that
/// minimises `x^2 * w_hi + (T - x)^2 * w_lo` over `1..=T-1` (proportional to the weights as
/// nearly as integers allow), the current `lo` when it is a minimum. Both ends compute it
/// from the same numbers. `T >= 2` (no node is ever empty).
pub fn load_target(lo: u64, hi: u64, w_lo: u64, w_hi: u64) -> u64 {
    let t = lo + hi;
    if t < 2 {
        return lo;
    }
    let cost = |x: u64| {
        let (x, y) = (u128::from(x), u128::from(t - x));
        x * x * u128::from(w_hi) + y * y * u128::from(w_lo)
    };
    let exact = u128::from(t) * u128::from(w_lo) / (u128::from(w_lo) + u128::from(w_hi));
    let exact = exact as u64;
    let mut best = lo.clamp(1, t - 1);
    for x in [exact, exact + 1] {
        let x = x.clamp(1, t - 1);
        if cost(x) < cost(best) {
            best = x;
        }
    }
    best
}

/// `records` sorted.
fn sort_records(mut records: Vec<Bytes>) -> Vec<Bytes> {
    records.sort_unstable();
    records
}

/// One trade of a cycle for the merge: (this node is the lower rank, the slice it sent, the
/// handoff records it received, the slice it received).
type Trade = (bool, Vec<Bytes>, Vec<Bytes>, Vec<Bytes>);

/// A cycle's merge: the kept slice, and per trade the received handoff and this node's half
/// of the two slices (the lower rank keeps the lowest records, as many as it sent), sorted.
fn merge_cycle(mut next: Vec<Bytes>, trades: Vec<Trade>) -> Vec<Bytes> {
    for (lower, mine, handoff, theirs) in trades {
        next.extend(handoff);
        let keep = mine.len();
        let mut both = mine;
        both.extend(theirs);
        both.sort_unstable();
        if lower {
            both.truncate(keep);
            next.extend(both);
        } else {
            next.extend(both.split_off(both.len() - keep));
        }
    }
    next.sort_unstable();
    next
}

/// Where a node is within its cycle.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Before `Input::Start`.
    Idle,
    /// Started; its backup copies are not all acknowledged yet, or the epoch's records are
    /// being sorted, so it trades nothing.
    Backing,
    /// Slices sent, waiting for the partners'.
    Trading,
    /// Merged; waiting for the application's `ComputeDone`.
    Computing,
    /// Cycle done; the next one needs a verdict not yet known.
    Waiting,
    /// The epoch's last cycle is done and [`HsortMsg::Ready`] sent (or, at the decider,
    /// counted): waiting for the decider's [`HsortMsg::Commit`] (see [`recovery`]'s "The end").
    Prepared,
    /// Delivered and finished (or aborted).
    Over,
}

/// A partner's frame of a cycle, kept until the cycle is merged.
#[derive(Clone, Debug)]
struct Inbound {
    count: u64,
    handoff: Vec<Bytes>,
    slice: Vec<Bytes>,
    /// Compressed frames of the slice (raw length, LZ4 block), decompressed in the task
    /// that sorts them.
    packed: Vec<(u32, Bytes)>,
    /// Records in `packed`.
    packed_n: usize,
    /// The frame without `more` arrived.
    done: bool,
}

/// A compute task's records, or the epoch rank of a partner whose compressed frame did not
/// decompress.
type Made = Result<Vec<Bytes>, usize>;

/// The exchange's frames for each partner, compressed off the event loop: (raw length if
/// compressed, payload).
type Zipped = BTreeMap<usize, Vec<(Option<u32>, Bytes)>>;

/// The handoff decided in a cycle, performed in the next: `(partner rank, records to send)`,
/// negative for records to receive.
type Handoff = (usize, i64);

/// A backup copy of another member's input.
#[derive(Clone, Debug, Default)]
struct Held {
    records: Vec<Bytes>,
    /// The frame without `more` arrived (and was acknowledged).
    whole: bool,
}

/// One member of a HeteroSort run: see the [module docs](self) and [`recovery`].
///
/// Timers, randomness: none. Compute tasks: one per cycle (the splitters' exchange: the
/// grouping pass, with compression the buckets' compression, each run and the merge), ids
/// counting up over the whole run (a task of an abandoned epoch is recognised and ignored
/// when it completes).
#[derive(Clone, Debug)]
pub struct HeteroSort {
    me: NodeId,
    /// The `now` of the input being handled, for [`HeteroSort::mark`].
    now: Time,
    /// The latest time each named step was passed, in the order first passed
    /// ([`Protocol::phases`]).
    phases: Vec<(&'static str, Time)>,
    /// Every member by id: a member's place here is its *member rank* (its snake rank in
    /// epoch 0).
    all: Vec<NodeId>,
    /// This node's member rank.
    mine: usize,
    transfer: TransferId,
    /// The spec's torus (epoch 0's).
    spec_torus: Torus,
    /// Every member's weight, by member rank.
    all_weights: Vec<u64>,
    backups: usize,
    /// This node's input records (unsorted): every epoch starts from them.
    input: Vec<Bytes>,
    /// The same input as one buffer (its backup copies are slices of it, not copies).
    input_bytes: Bytes,
    /// Backup copies of other members' inputs, by member rank.
    held: BTreeMap<usize, Held>,
    /// Holders (member ranks) that acknowledged this node's copy.
    acked: BTreeSet<usize>,
    /// Members counted as failed (member ranks); the epoch is its size.
    failed: BTreeSet<usize>,
    /// Failed members this node restores but holds no whole copy of.
    lost: BTreeSet<usize>,
    /// Epochs abandoned for a later one.
    restarts: u32,
    // The epoch's sort: ranks are places in `ids`, the survivors in snake order.
    rank: usize,
    ids: Vec<NodeId>,
    torus: Torus,
    weights: Vec<u64>,
    record_len: usize,
    /// Sorted records.
    data: Vec<Bytes>,
    cycle: u32,
    phase: Phase,
    status: Status,
    /// This cycle's partners (ascending rank) and the slice sent to each.
    sent: Vec<(usize, Vec<Bytes>)>,
    /// The slice this node keeps in this cycle.
    kept: Vec<Bytes>,
    /// This cycle's expected handoff in: `(partner rank, records)`.
    expect_in: Option<(usize, u64)>,
    /// Count after this cycle's handoffs.
    count: u64,
    /// Decided in this cycle, performed in the next.
    next_handoff: Option<Handoff>,
    inbox: BTreeMap<(u32, usize), Inbound>,
    /// Checks from rank - 1, by cycle.
    checks: BTreeMap<u32, (bool, Bytes)>,
    /// This node's (smallest, largest) record after each cycle not yet checked.
    /// (None: no records, which only the exchange of [`Slicing::Splitters`] can leave.)
    summaries: BTreeMap<u32, Option<(Bytes, Bytes)>>,
    /// Verdicts known, by cycle.
    verdicts: BTreeMap<u32, bool>,
    /// Stop after this cycle.
    stop_after: Option<u32>,
    /// The record count after each cycle of this epoch (index 0: its start).
    history: Vec<u64>,
    /// The compute task in progress, and the next task id.
    task: Option<TaskId>,
    next_task: u32,
    /// The sort or merge of the task in progress (see [`crate::app`]).
    job: Option<Job<Made>>,
    compress: Compress,
    /// The exchange's buckets, cut and waiting for `zip` (the task in progress) to compress
    /// the ones for other clusters.
    pending: Option<BTreeMap<usize, Vec<Bytes>>>,
    zip: Option<Job<Zipped>>,
    /// The compressed frames, by partner, until sent.
    zipped: Zipped,
    /// The epoch's records are sorted (its first sort is done).
    epoch_sorted: bool,
    /// [`Slicing::Splitters`]: cycle 1 is the exchange by splitters.
    splitters_mode: bool,
    /// Samples by member rank: (epoch, count, samples), this node's own included.
    samples: BTreeMap<usize, (u32, u64, Vec<Bytes>)>,
    /// This node sent its samples of the epoch.
    sampled: bool,
    /// The epoch's splitters (one fewer than its members), once computed.
    splitters: Vec<Bytes>,
    /// [`Slicing::Splitters`]: the epoch's splitters are computed (and its records are being
    /// or have been cut into buckets by them).
    split_ready: bool,
    /// [`Slicing::Splitters`]' exchange: the sorted runs made so far of the records that
    /// arrived (and of this node's own bucket), merged into the range once every bucket is in.
    runs: Vec<Vec<Bytes>>,
    /// [`Slicing::Splitters`]' exchange: per partner (epoch rank), how many of its raw records
    /// and of its compressed frames arrived so far went into a run (or the run being sorted).
    taken: BTreeMap<usize, (usize, usize)>,
    /// Every member's cluster as an index, by member rank (empty: not known, see
    /// [`HeteroSort::with_clusters`]).
    cluster_of: Vec<usize>,
    /// Splitters' check at the last rank: every rank's (smallest, largest) record after each
    /// cycle (None: no records), as the ranks report them.
    gathered: BTreeMap<u32, BTreeMap<usize, Option<(Bytes, Bytes)>>>,
    /// Every member's backup holders, by member rank ([`recovery::holders`], or
    /// [`recovery::holders_by_cluster`] for Splitters given the clusters).
    holders_of: Vec<Vec<usize>>,
    /// At the decider (the epoch's last rank): the ranks whose [`HsortMsg::Ready`] is in.
    readies: BTreeSet<usize>,
    /// Prepared, not the decider: members (member ranks) its Host reported failed since it
    /// sent its Ready. Kept aside until the decider's commit or a failure notice settles the
    /// epoch (see [`recovery`]'s "The end").
    deferred: BTreeSet<usize>,
    /// Prepared, not the decider, and the decider is reported failed: the end is unknown
    /// until a commit, a failure notice, or every other live rank's "undecided" settles it.
    orphaned: bool,
    /// Orphaned: the ranks that told this node they are prepared and lost the decider too.
    undecided: BTreeSet<usize>,
}

/// Samples per member and per rank for [`Slicing::Splitters`]: the heaviest rank's share is
/// off by about `1 / SPLITTER_OVERSAMPLE` of a member's share at worst.
pub const SPLITTER_OVERSAMPLE: u64 = 8;

/// [`Slicing::Splitters`] samples a node's records before sorting them: its samples are
/// regular samples of a sorted pool of this many times as many records, taken at regular
/// positions of its unsorted records.
pub const SAMPLE_POOL: u64 = 32;

/// `data` grouped by the bucket of each record (bucket `q`: the records above splitter
/// `q - 1` and at most splitter `q`), buckets in order, each in its records' input order.
fn group_by_bucket(data: Vec<Bytes>, splitters: &[Bytes]) -> Vec<Bytes> {
    let mut buckets: Vec<Vec<Bytes>> = vec![Vec::new(); splitters.len() + 1];
    for r in data {
        let q = splitters.partition_point(|sp| *sp < r);
        buckets[q].push(r);
    }
    buckets.concat()
}

/// `batch` with the records of the compressed frames `zs` (partner, raw length, LZ4 block)
/// added; the partner of the first frame that does not decompress.
fn unpack_onto(
    mut batch: Vec<Bytes>,
    zs: Vec<(usize, u32, Bytes)>,
    record_len: usize,
) -> Result<Vec<Bytes>, usize> {
    for (q, n, z) in zs {
        let raw = sort_zip::unpack(n, &z).map_err(|_| q)?;
        batch.extend(sort_zip::records(&raw, record_len));
    }
    Ok(batch)
}

/// Sorted runs merged into one sorted sequence (ties taken from the earlier run first).
fn merge_runs(runs: Vec<Vec<Bytes>>) -> Vec<Bytes> {
    use std::cmp::Reverse;
    use std::collections::binary_heap::{BinaryHeap, PeekMut};
    let mut runs: Vec<Vec<Bytes>> = runs.into_iter().filter(|r| !r.is_empty()).collect();
    if runs.len() <= 1 {
        return runs.pop().unwrap_or_default();
    }
    let total = runs.iter().map(Vec::len).sum();
    let mut merged = Vec::with_capacity(total);
    let mut rest: Vec<std::vec::IntoIter<Bytes>> = runs.into_iter().map(Vec::into_iter).collect();
    let mut heap: BinaryHeap<Reverse<(Bytes, usize)>> = rest
        .iter_mut()
        .enumerate()
        .filter_map(|(i, r)| r.next().map(|b| Reverse((b, i))))
        .collect();
    while let Some(mut top) = heap.peek_mut() {
        let i = top.0 .1;
        match rest[i].next() {
            Some(next) => {
                let Reverse((b, _)) = std::mem::replace(&mut *top, Reverse((next, i)));
                merged.push(b);
            }
            None => {
                let Reverse((b, _)) = PeekMut::pop(top);
                merged.push(b);
            }
        }
    }
    merged
}

impl HeteroSort {
    /// The machine of `me` among `members` (any order; ranked by id), with its own records
    /// `input` (whole records, at least one).
    pub fn new(
        me: NodeId,
        members: &[NodeId],
        transfer: TransferId,
        spec: &HsortSpec,
        input: Bytes,
    ) -> Result<HeteroSort, String> {
        let mut ids = members.to_vec();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != members.len() {
            return Err("a member is listed twice".into());
        }
        let (torus, weights) = spec.check(ids.len())?;
        let rank = ids
            .iter()
            .position(|&n| n == me)
            .ok_or_else(|| format!("node {me} is not a member of the sort"))?;
        let record_len = spec.record_len as usize;
        if input.is_empty() {
            return Err(format!(
                "node {me}: an empty input share (every member starts with at least one record)"
            ));
        }
        if !input.len().is_multiple_of(record_len) {
            return Err(format!(
                "node {me}: the input of {} bytes is not whole records of {record_len} bytes",
                input.len()
            ));
        }
        // Sorted in the epoch's first compute task, off the event loop.
        let data: Vec<Bytes> = (0..input.len() / record_len)
            .map(|i| input.slice(i * record_len..(i + 1) * record_len))
            .collect();
        let history = vec![data.len() as u64];
        Ok(HeteroSort {
            me,
            now: Time::ZERO,
            phases: Vec::new(),
            all: ids.clone(),
            mine: rank,
            transfer,
            spec_torus: torus,
            all_weights: weights.clone(),
            backups: (spec.backups as usize).min(ids.len() - 1),
            input: data.clone(),
            input_bytes: input,
            held: BTreeMap::new(),
            acked: BTreeSet::new(),
            failed: BTreeSet::new(),
            lost: BTreeSet::new(),
            restarts: 0,
            rank,
            ids,
            torus,
            weights,
            record_len,
            count: data.len() as u64,
            data,
            cycle: 0,
            phase: Phase::Idle,
            status: Status::Running,
            sent: Vec::new(),
            kept: Vec::new(),
            expect_in: None,
            next_handoff: None,
            inbox: BTreeMap::new(),
            checks: BTreeMap::new(),
            summaries: BTreeMap::new(),
            verdicts: BTreeMap::new(),
            stop_after: None,
            history,
            task: None,
            next_task: 0,
            job: None,
            compress: spec.compress,
            pending: None,
            zip: None,
            zipped: BTreeMap::new(),
            epoch_sorted: false,
            splitters_mode: spec.slicing == Slicing::Splitters,
            samples: BTreeMap::new(),
            sampled: false,
            splitters: Vec::new(),
            split_ready: false,
            runs: Vec::new(),
            taken: BTreeMap::new(),
            cluster_of: Vec::new(),
            gathered: BTreeMap::new(),
            holders_of: (0..members.len())
                .map(|j| {
                    let b = (spec.backups as usize).min(members.len() - 1);
                    recovery::holders(j, members.len(), b)
                })
                .collect(),
            readies: BTreeSet::new(),
            deferred: BTreeSet::new(),
            orphaned: false,
            undecided: BTreeSet::new(),
        })
    }

    /// Tells the machine each member's cluster (`members`: every member's id and cluster, as
    /// the Host's build context gives them). With [`Slicing::Splitters`] the backup copies
    /// then stay inside their owners' clusters ([`recovery::holders_by_cluster`]); other
    /// slicings keep the paper's next-members rule. Call before the run starts.
    pub fn with_clusters<C: PartialEq + Copy>(mut self, members: &[(NodeId, C)]) -> HeteroSort {
        if !self.splitters_mode {
            return self;
        }
        let clusters: Option<Vec<C>> = self
            .all
            .iter()
            .map(|id| members.iter().find(|(n, _)| n == id).map(|(_, c)| *c))
            .collect();
        if let Some(clusters) = clusters {
            self.holders_of = recovery::holders_by_cluster(&clusters, self.backups);
            self.cluster_of = clusters
                .iter()
                .map(|c| {
                    clusters
                        .iter()
                        .position(|d| d == c)
                        .expect("a cluster is its own first occurrence")
                })
                .collect();
        }
        self
    }

    /// This node's snake rank in the current epoch.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The member at every snake rank of the current epoch (the survivors).
    pub fn members(&self) -> &[NodeId] {
        &self.ids
    }

    /// The members this node counts as failed, by id.
    pub fn failed(&self) -> Vec<NodeId> {
        self.failed.iter().map(|&r| self.all[r]).collect()
    }

    /// The epoch: how many members this node counts as failed.
    pub fn epoch(&self) -> u32 {
        self.failed.len() as u32
    }

    /// Epochs this node abandoned (restarted from the inputs) after a failure.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// Failed members whose records this node should have restored but held no whole copy
    /// of: they failed before their backup copy reached it, so before they traded a record
    /// (see [`recovery`]). Empty in every run whose failures come after the backups.
    pub fn lost(&self) -> Vec<NodeId> {
        self.lost.iter().map(|&r| self.all[r]).collect()
    }

    /// The node's records now, sorted.
    pub fn records(&self) -> &[Bytes] {
        &self.data
    }

    /// The cycle in progress (or the last one).
    pub fn cycle(&self) -> u32 {
        self.cycle
    }

    /// Record count after each cycle; entry 0 is the input's.
    pub fn history(&self) -> &[u64] {
        &self.history
    }

    /// [`Slicing::Splitters`]: the run's cycle 1 is the exchange by splitters, and it ends at
    /// the cycle its verdict finds sorted (not one cycle later).
    pub fn uses_splitters(&self) -> bool {
        self.splitters_mode
    }

    /// The node holds its final range and its Ready is sent (or, at the decider, counted):
    /// it waits for the commit (see [`recovery`]'s "The end").
    pub fn prepared(&self) -> bool {
        self.phase == Phase::Prepared
    }

    /// The first cycle whose verdict was "sorted", once known here.
    pub fn sorted_at(&self) -> Option<u32> {
        self.verdicts.iter().find(|(_, &s)| s).map(|(&c, _)| c)
    }

    fn n(&self) -> usize {
        self.ids.len()
    }

    /// The sequence partner matched with `rank` in cycle `c`, if any.
    fn matched(&self, c: u32) -> Option<usize> {
        let r = self.rank;
        let up = r.is_multiple_of(2) != c.is_multiple_of(2);
        let m = if up { r + 1 } else { r.checked_sub(1)? };
        (m < self.n()).then_some(m)
    }

    /// [`Slicing::Splitters`]' exchange: cycle 1 of every epoch.
    fn exchange(&self, c: u32) -> bool {
        self.splitters_mode && c == 1
    }

    fn partners(&self, c: u32) -> Vec<usize> {
        if self.exchange(c) {
            return (0..self.n()).filter(|&q| q != self.rank).collect();
        }
        let mut p = self
            .torus
            .trading_list(self.rank, Cycle::of(u64::from(c)))
            .expect("the rank is on the torus");
        p.retain(|&q| q != self.rank);
        p.sort_unstable();
        p
    }

    /// Sends this node's input to its backup holders and waits for their acknowledgements
    /// (a node with no backups starts trading at once).
    /// Notes that the node passed step `name` now (the latest pass counts: after a failure
    /// the new epoch's steps replace the old ones').
    fn mark(&mut self, name: &'static str) {
        let now = self.now;
        match self.phases.iter_mut().find(|(n, _)| *n == name) {
            Some(p) => p.1 = now,
            None => self.phases.push((name, now)),
        }
    }

    /// One `Slice` frame of cycle `c` (`packed`: see [`HsortMsg::Slice`]).
    fn slice_frame(
        &self,
        c: u32,
        handoff: u32,
        records: Bytes,
        more: bool,
        packed: Option<u32>,
    ) -> Message {
        Message::HeteroSort(HsortMsg::Slice {
            transfer: self.transfer,
            epoch: self.epoch(),
            cycle: c,
            count: self.count,
            record_len: self.record_len as u16,
            handoff,
            records,
            more,
            packed,
        })
    }

    fn start(&mut self, out: &mut Outputs) {
        self.phase = Phase::Backing;
        if !self.failed.is_empty() {
            self.announce(out);
        }
        if self.splitters_mode {
            // The samples first: every member's splitters wait for every member's samples,
            // and a sample frame queued behind a copy's megabytes on the same connection held
            // the fast members (the holders) back by seconds on the testbed. The exchange's
            // frames still follow the copy (they wait for the splitters).
            self.begin_epoch(out);
            self.send_backups(out);
        } else {
            self.send_backups(out);
            self.begin_epoch(out);
        }
    }

    /// Sends this node's input to its live backup holders.
    fn send_backups(&mut self, out: &mut Outputs) {
        // The copy's frames are slices of the input buffer (whole records each), not copies.
        let per_frame = (MAX_SLICE_PAYLOAD / self.record_len).max(1) * self.record_len;
        let len = self.input_bytes.len();
        for h in self.holders_of[self.mine].clone() {
            if self.failed.contains(&h) {
                continue;
            }
            let mut at = 0;
            while at < len {
                let end = (at + per_frame).min(len);
                out.send(
                    self.all[h],
                    Message::HeteroSort(HsortMsg::Backup {
                        transfer: self.transfer,
                        record_len: self.record_len as u16,
                        records: self.input_bytes.slice(at..end),
                        more: end < len,
                    }),
                );
                at = end;
            }
        }
    }

    /// Starts the epoch's first cycle once every live holder has this node's whole input and
    /// the epoch's records are sorted.
    fn maybe_begin(&mut self, out: &mut Outputs) {
        if self.phase != Phase::Backing {
            return;
        }
        // Splitters trade at once and hold their check instead (see `wave`).
        if !self.splitters_mode && (!self.epoch_sorted || !self.copies_placed()) {
            return;
        }
        if self.splitters_mode && !self.split_ready {
            // Every live member's samples of the epoch: the same splitters everywhere.
            let live = self.ids.len();
            let ranks: Vec<usize> = (0..self.all.len())
                .filter(|r| !self.failed.contains(r))
                .collect();
            let epoch = self.epoch();
            if !ranks
                .iter()
                .all(|r| self.samples.get(r).is_some_and(|s| s.0 == epoch))
            {
                return;
            }
            let mut all: Vec<(Bytes, u64)> = Vec::new();
            for r in &ranks {
                let (_, count, samples) = self.samples[r].clone();
                all.extend(crate::sample_sort::with_weights(count, samples));
            }
            all.sort_by(|a, b| a.0.cmp(&b.0));
            self.splitters = crate::sample_sort::weighted_splitters(&all, &self.weights);
            debug_assert!(self.splitters.len() < live.max(1));
            self.split_ready = true;
            self.mark("splitters");
            // The records, unsorted, grouped by bucket (a compute task, off the event loop):
            // each bucket is then a contiguous run, as in a sorted node.
            let data = std::mem::take(&mut self.data);
            let splitters = self.splitters.clone();
            self.sort_job(data.len(), move || group_by_bucket(data, &splitters), out);
            return;
        }
        // Cycle 1 started already when its frames are being compressed.
        if !self.epoch_sorted || self.pending.is_some() {
            return;
        }
        self.start_cycle(1, out);
    }

    /// Every live holder acknowledged this node's whole copy.
    fn copies_placed(&self) -> bool {
        self.holders_of[self.mine]
            .clone()
            .into_iter()
            .all(|h| self.failed.contains(&h) || self.acked.contains(&h))
    }

    /// [`Slicing::Splitters`]: sends this node's record count and samples to every live
    /// member at the epoch's start, before its records are sorted: `s = min(count, 8 p)`
    /// regular samples of a sorted subset of [`SAMPLE_POOL`]` x s` records taken at regular
    /// positions of its (unsorted) records, weighted as regular samples of the whole.
    fn send_samples(&mut self, out: &mut Outputs) {
        if !self.splitters_mode || self.sampled {
            return;
        }
        self.sampled = true;
        let count = self.data.len() as u64;
        let s = count.min(SPLITTER_OVERSAMPLE * self.n() as u64);
        let mut pool: Vec<Bytes> =
            crate::sample_sort::sample_positions(count, count.min(SAMPLE_POOL * s))
                .map(|i| self.data[i as usize].clone())
                .collect();
        pool.sort_unstable();
        let mine: Vec<Bytes> = crate::sample_sort::sample_positions(pool.len() as u64, s)
            .map(|i| pool[i as usize].clone())
            .collect();
        let mut payload = BytesMut::with_capacity(mine.len() * self.record_len);
        for r in &mine {
            payload.extend_from_slice(r);
        }
        let payload = payload.freeze();
        for (q, &id) in self.ids.iter().enumerate() {
            if q != self.rank {
                out.send(
                    id,
                    Message::HeteroSort(HsortMsg::Samples {
                        transfer: self.transfer,
                        epoch: self.epoch(),
                        count,
                        record_len: self.record_len as u16,
                        samples: payload.clone(),
                    }),
                );
            }
        }
        self.samples.insert(self.mine, (self.epoch(), count, mine));
        self.mark("samples_sent");
    }

    /// Tells every live member which members this node counts as failed.
    fn announce(&mut self, out: &mut Outputs) {
        let ranks: Vec<usize> = self.failed.iter().copied().collect();
        for (r, &id) in self.all.iter().enumerate() {
            if r != self.mine && !self.failed.contains(&r) {
                out.send(
                    id,
                    Message::HeteroSort(HsortMsg::failed(self.transfer, &ranks)),
                );
            }
        }
    }

    /// Members `news` (member ranks) failed: a new epoch from the inputs, see [`recovery`].
    fn learn_failed(&mut self, news: &[usize], out: &mut Outputs) {
        if self.status != Status::Running || self.phase == Phase::Over {
            return;
        }
        if news.contains(&self.mine) {
            // The others went on without this node (it was silent too long, say): its input
            // is restored by its holders, so it must not deliver anything.
            let me = self.me;
            self.abort(AbortReason::PeerFailed { peer: me }, out);
            return;
        }
        let before = self.failed.len();
        self.failed.extend(news.iter().copied());
        if self.failed.len() == before {
            return;
        }
        let unrestorable = self
            .failed
            .iter()
            .find(|&&j| recovery::first_live(&self.holders_of[j], &self.failed).is_none());
        if let Some(&j) = unrestorable {
            // Every copy of its input is gone (or there were none): the run cannot complete.
            let peer = self.all[j];
            self.abort(AbortReason::PeerFailed { peer }, out);
            return;
        }
        self.announce(out);
        // What arrived for the old epoch (frames of the new one come after the notice).
        self.inbox.clear();
        self.checks.clear();
        self.gathered.clear();
        self.verdicts.clear();
        self.readies.clear();
        self.deferred.clear();
        self.orphaned = false;
        self.undecided.clear();
        match self.phase {
            Phase::Idle => {}
            // Nothing traded yet: the epoch's records change (a restored copy), not a restart.
            Phase::Backing => self.begin_epoch(out),
            _ => {
                self.restarts += 1;
                self.begin_epoch(out);
            }
        }
    }

    /// Rolls back to the inputs over the survivors: this node's input and the copies it
    /// restores, on a `1 x m` torus in snake order; sorts them (a compute task) and starts
    /// cycle 1 once they are sorted and the backups placed ([`Self::maybe_begin`]).
    fn begin_epoch(&mut self, out: &mut Outputs) {
        let n = self.all.len();
        let live: Vec<usize> = (0..n).filter(|r| !self.failed.contains(r)).collect();
        self.ids = live.iter().map(|&r| self.all[r]).collect();
        self.rank = live
            .iter()
            .position(|&r| r == self.mine)
            .expect("a node that counts itself failed has aborted");
        self.weights = live.iter().map(|&r| self.all_weights[r]).collect();
        self.torus = if self.failed.is_empty() {
            self.spec_torus
        } else {
            Torus::new(1, live.len()).expect("at least this node is live")
        };
        let mut data = self.input.clone();
        for &j in &self.failed {
            if recovery::first_live(&self.holders_of[j], &self.failed) != Some(self.mine) {
                continue;
            }
            match self.held.get(&j) {
                Some(h) if h.whole => data.extend(h.records.iter().cloned()),
                _ => {
                    self.lost.insert(j);
                }
            }
        }
        self.data = Vec::new();
        self.cycle = 0;
        self.sent.clear();
        self.kept.clear();
        self.expect_in = None;
        self.next_handoff = None;
        self.summaries.clear();
        self.stop_after = None;
        // Samples of this epoch may be in already (before this node's start): keep those.
        let epoch = self.epoch();
        let mine = self.mine;
        self.samples.retain(|&r, s| s.0 == epoch && r != mine);
        self.sampled = false;
        self.splitters.clear();
        self.split_ready = false;
        self.runs.clear();
        self.taken.clear();
        self.pending = None;
        self.zip = None;
        self.zipped.clear();
        self.history = vec![data.len() as u64];
        // A task of the abandoned epoch still runs: its completion is ignored.
        self.phase = Phase::Backing;
        self.epoch_sorted = false;
        if self.splitters_mode {
            // Splitters sort nothing before the exchange: samples of the unsorted records go
            // out at once, the records are cut into buckets by the splitters, and the
            // receivers sort what arrives while the rest is still on its way.
            self.task = None;
            self.job = None;
            self.data = data;
            self.send_samples(out);
            self.maybe_begin(out);
            return;
        }
        self.sort_job(data.len(), move || sort_records(data), out);
    }

    /// Asks for the records `f` makes (a sort or a merge of `records` records) through the
    /// application's compute, so the work runs off the event loop ([`crate::app`]).
    fn sort_job(
        &mut self,
        records: usize,
        f: impl FnOnce() -> Vec<Bytes> + Send + 'static,
        out: &mut Outputs,
    ) {
        let len = (records * self.record_len) as u64;
        self.job_of(len, move || Ok(f()), out);
    }

    /// Asks for the records `f` makes, charged as `len` bytes of sorting (see [`sort_zip`]).
    fn job_of(&mut self, len: u64, f: impl FnOnce() -> Made + Send + 'static, out: &mut Outputs) {
        let job = Job::new(f);
        let task = self.new_task(len, job.work(), out);
        self.task = Some(task);
        self.job = Some(job);
    }

    fn new_task(&mut self, len: u64, work: crate::app::Work, out: &mut Outputs) -> TaskId {
        let task = TaskId(self.next_task);
        self.next_task += 1;
        out.push(Output::Compute(ComputeTask {
            task,
            offset: 0,
            len,
            data: Vec::new(),
            work: Some(work),
        }));
        task
    }

    /// Whether the exchange's frames to epoch rank `q` are compressed: compression is on
    /// and `q` is in another cluster (or the clusters are unknown).
    fn zipped_to(&self, q: usize) -> bool {
        self.compress != Compress::None && q != self.rank && !self.same_cluster(q)
    }

    /// `(packed, records)` of the compressed frames `zs` (partner, raw length, block)
    /// decompressed onto `batch`: the sort-equivalent bytes to charge.
    fn unpack_cost(&self, batch: usize, zs: &[(usize, u32, Bytes)]) -> u64 {
        let raw: usize = zs.iter().map(|(_, n, _)| *n as usize).sum();
        (batch * self.record_len + raw) as u64 + sort_zip::decompress_cost(raw)
    }

    fn start_cycle(&mut self, c: u32, out: &mut Outputs) {
        self.cycle = c;
        // 1. The handoff decided last cycle.
        let mut handoff_out: (usize, Vec<Bytes>) = (usize::MAX, Vec::new());
        self.expect_in = None;
        if let Some((p, d)) = self.next_handoff.take() {
            if d > 0 {
                let d = d as usize;
                let moved: Vec<Bytes> = if p > self.rank {
                    self.data.split_off(self.data.len() - d)
                } else {
                    let rest = self.data.split_off(d);
                    std::mem::replace(&mut self.data, rest)
                };
                handoff_out = (p, moved);
            } else if d < 0 {
                self.expect_in = Some((p, d.unsigned_abs()));
            }
        }
        self.count = self.data.len() as u64 + self.expect_in.map_or(0, |(_, k)| k);
        if self.exchange(c) {
            self.mark("exchange_start");
            // The exchange: every rank's bucket by the splitters (the node's records are
            // sorted, so each bucket is a contiguous run), even an empty one.
            let data = std::mem::take(&mut self.data);
            let mut slices: BTreeMap<usize, Vec<Bytes>> = BTreeMap::new();
            let mut start = 0;
            for q in 0..self.n() {
                let end = match self.splitters.get(q) {
                    Some(sp) => start + data[start..].partition_point(|r| r <= sp),
                    None => data.len(),
                };
                slices.insert(q, data[start..end].to_vec());
                start = end;
            }
            let zip: Vec<(usize, Vec<Bytes>)> = slices
                .iter()
                .filter(|(q, s)| self.zipped_to(**q) && !s.is_empty())
                .map(|(q, s)| (*q, s.clone()))
                .collect();
            if zip.is_empty() {
                self.send_slices(c, slices, (usize::MAX, Vec::new()), out);
                return;
            }
            // The buckets for other clusters compressed in a compute task, off the event
            // loop; the frames go out when it is done.
            let bytes: usize = zip.iter().map(|(_, s)| s.len() * self.record_len).sum();
            let per_frame = (MAX_SLICE_PAYLOAD / self.record_len).max(1);
            let job = Job::new(move || {
                zip.into_iter()
                    .map(|(q, s)| {
                        let frames = s
                            .chunks(per_frame)
                            .map(|chunk| sort_zip::pack(Bytes::from(chunk.concat())))
                            .collect();
                        (q, frames)
                    })
                    .collect()
            });
            let task = self.new_task(sort_zip::compress_cost(bytes), job.work(), out);
            self.task = Some(task);
            self.zip = Some(job);
            self.pending = Some(slices);
            return;
        }
        // 2. Slices: the matched partner's from the boundary, the others in list order.
        let list = self
            .torus
            .trading_list(self.rank, Cycle::of(u64::from(c)))
            .expect("the rank is on the torus");
        let w: Vec<u64> = list.iter().map(|&q| self.weights[q]).collect();
        let mut data = std::mem::take(&mut self.data);
        let mut slices: BTreeMap<usize, Vec<Bytes>> = BTreeMap::new();
        let matched = self.matched(c);
        let mut rest_list = list.clone();
        if let Some(m) = matched {
            let i = list
                .iter()
                .position(|&q| q == m)
                .expect("a sequence partner");
            let sizes = weighted_slices(data.len(), &w).expect("weights are positive");
            let b = sizes[i].len().max(1).min(data.len());
            let boundary = if m > self.rank {
                data.split_off(data.len() - b)
            } else {
                let rest = data.split_off(b);
                std::mem::replace(&mut data, rest)
            };
            slices.insert(m, boundary);
            rest_list.retain(|&q| q != m);
        }
        let rw: Vec<u64> = rest_list.iter().map(|&q| self.weights[q]).collect();
        let ranges = weighted_slices(data.len(), &rw).expect("weights are positive");
        for (q, r) in rest_list.iter().zip(ranges) {
            slices.insert(*q, data[r].to_vec());
        }
        self.send_slices(c, slices, handoff_out, out);
    }

    /// Keeps this node's own slice of `slices` and sends every other (with the handoff to its
    /// partner first): one frame or more per partner, ascending rank.
    fn send_slices(
        &mut self,
        c: u32,
        mut slices: BTreeMap<usize, Vec<Bytes>>,
        handoff_out: (usize, Vec<Bytes>),
        out: &mut Outputs,
    ) {
        self.kept = slices.remove(&self.rank).unwrap_or_default();
        // 3. One frame per partner, ascending rank; in the exchange the partners in other
        // clusters first (their buckets take the slow links).
        self.sent.clear();
        let mut slices: Vec<(usize, Vec<Bytes>)> = slices.into_iter().collect();
        if self.exchange(c) {
            slices.sort_by_key(|(q, _)| (self.same_cluster(*q), *q));
        }
        for (q, slice) in slices {
            if let Some(frames) = self.zipped.remove(&q) {
                let last = frames.len() - 1;
                for (i, (packed, records)) in frames.into_iter().enumerate() {
                    let frame = self.slice_frame(c, 0, records, i < last, packed);
                    out.send(self.ids[q], frame);
                }
                self.sent.push((q, slice));
                continue;
            }
            let ho: &[Bytes] = if handoff_out.0 == q {
                &handoff_out.1
            } else {
                &[]
            };
            let per_frame = (MAX_SLICE_PAYLOAD / self.record_len).max(1);
            let all: Vec<&Bytes> = ho.iter().chain(&slice).collect();
            let mut chunks = all.chunks(per_frame).peekable();
            let mut first = 0;
            loop {
                let chunk: &[&Bytes] = chunks.next().unwrap_or(&[]);
                let mut payload = BytesMut::with_capacity(chunk.len() * self.record_len);
                for r in chunk {
                    payload.extend_from_slice(r);
                }
                let handoff = ho.len().saturating_sub(first).min(chunk.len());
                first += chunk.len();
                let more = chunks.peek().is_some();
                let frame = self.slice_frame(c, handoff as u32, payload.freeze(), more, None);
                out.send(self.ids[q], frame);
                if !more {
                    break;
                }
            }
            self.sent.push((q, slice));
        }
        self.phase = Phase::Trading;
        self.try_merge(out);
    }

    /// Whether epoch rank `q` is in this node's cluster (false when clusters are unknown).
    fn same_cluster(&self, q: usize) -> bool {
        let Ok(m) = self.all.binary_search(&self.ids[q]) else {
            return false;
        };
        !self.cluster_of.is_empty() && self.cluster_of[m] == self.cluster_of[self.mine]
    }

    /// [`Slicing::Splitters`]' exchange, while no compute task runs: the records that arrived
    /// since the last run (and this node's own bucket) are sorted into a new run; once every
    /// bucket is in, the last of them are sorted and every run merged into the node's range
    /// (the cycle's compute task). So the sort happens while the WAN is still carrying the
    /// rest, and what is left after the last frame is one run's sort and the merge.
    fn feed(&mut self, out: &mut Outputs) {
        if self.phase != Phase::Trading || self.task.is_some() {
            return;
        }
        let c = self.cycle;
        let mut batch = std::mem::take(&mut self.kept);
        let mut zs: Vec<(usize, u32, Bytes)> = Vec::new();
        let mut all_in = true;
        for (q, _) in &self.sent {
            let Some(m) = self.inbox.get(&(c, *q)) else {
                all_in = false;
                continue;
            };
            all_in &= m.done;
            let t = self.taken.entry(*q).or_default();
            batch.extend_from_slice(&m.slice[t.0..]);
            t.0 = m.slice.len();
            zs.extend(m.packed[t.1..].iter().map(|(n, z)| (*q, *n, z.clone())));
            t.1 = m.packed.len();
        }
        let len = self.record_len;
        if !all_in {
            if !batch.is_empty() || !zs.is_empty() {
                let cost = self.unpack_cost(batch.len(), &zs);
                self.job_of(
                    cost,
                    move || Ok(sort_records(unpack_onto(batch, zs, len)?)),
                    out,
                );
            }
            return;
        }
        for (q, _) in std::mem::take(&mut self.sent) {
            let m = self.inbox.remove(&(c, q)).expect("checked above");
            if !m.handoff.is_empty() {
                let peer = self.ids[q];
                self.abort(AbortReason::PeerFailed { peer }, out);
                return;
            }
        }
        self.mark("exchange_end");
        let mut runs = std::mem::take(&mut self.runs);
        let before = runs.iter().map(Vec::len).sum::<usize>();
        let unpacked: usize = zs.iter().map(|(_, n, _)| *n as usize).sum::<usize>() / len;
        self.history.push((before + batch.len() + unpacked) as u64);
        let cost = self.unpack_cost(before + batch.len(), &zs);
        self.job_of(
            cost,
            move || {
                runs.push(sort_records(unpack_onto(batch, zs, len)?));
                Ok(merge_runs(runs))
            },
            out,
        );
        self.phase = Phase::Computing;
    }

    fn try_merge(&mut self, out: &mut Outputs) {
        if self.phase != Phase::Trading {
            return;
        }
        let c = self.cycle;
        if self.exchange(c) {
            self.feed(out);
            return;
        }
        let done = |q: &usize| self.inbox.get(&(c, *q)).is_some_and(|m| m.done);
        if !self.sent.iter().all(|(q, _)| done(q)) {
            return;
        }
        // Frames that arrived a cycle early are checked now that the cycle's plan is known.
        for (q, _) in &self.sent {
            let m = &self.inbox[&(c, *q)];
            let want = match self.expect_in {
                Some((p, k)) if p == *q => k,
                _ => 0,
            };
            if m.handoff.len() as u64 != want {
                let peer = self.ids[*q];
                self.abort(AbortReason::PeerFailed { peer }, out);
                return;
            }
        }
        // The merge is the cycle's compute task (off the event loop); its size is known now.
        let kept = std::mem::take(&mut self.kept);
        let mut size = kept.len();
        let mut partner_count = None;
        let mut trades = Vec::new();
        for (q, mine) in std::mem::take(&mut self.sent) {
            let m = self.inbox.remove(&(c, q)).expect("checked above");
            if Some(q) == self.matched(c) {
                partner_count = Some(m.count);
            }
            size += m.handoff.len() + mine.len();
            trades.push((self.rank < q, mine, m.handoff, m.slice));
        }
        if let (Some(m), Some(theirs)) = (self.matched(c), partner_count) {
            let mine = size as u64;
            let (lo, hi, wl, wh) = if self.rank < m {
                (mine, theirs, self.weights[self.rank], self.weights[m])
            } else {
                (theirs, mine, self.weights[m], self.weights[self.rank])
            };
            let d = lo as i64 - load_target(lo, hi, wl, wh) as i64;
            let d = if self.rank < m { d } else { -d };
            if d != 0 {
                self.next_handoff = Some((m, d));
            }
        }
        self.history.push(size as u64);
        self.sort_job(size, move || merge_cycle(kept, trades), out);
        self.phase = Phase::Computing;
    }

    fn computed(&mut self, out: &mut Outputs) {
        self.task = None;
        self.mark("merged");
        let c = self.cycle;
        let ends = self.data.first().cloned().zip(self.data.last().cloned());
        self.summaries.insert(c, ends);
        self.phase = Phase::Waiting;
        self.wave(out);
        self.advance(out);
    }

    /// Moves the check wave on as far as this node can.
    fn wave(&mut self, out: &mut Outputs) {
        // With Splitters a node passes no check on before its copies are placed, so no verdict
        // (and no delivery) comes before every member's copy is placed.
        if self.splitters_mode && !self.copies_placed() {
            return;
        }
        if self.splitters_mode {
            self.gather(out);
            return;
        }
        while let Some((&c, _)) = self.summaries.first_key_value() {
            let incoming = if self.rank == 0 {
                // Rank 0 starts the wave of c once verdict c - 1 is known "not sorted".
                if c > 1 && self.verdicts.get(&(c - 1)) != Some(&false) {
                    return;
                }
                (true, Bytes::new())
            } else {
                match self.checks.remove(&c) {
                    Some(x) => x,
                    None => return,
                }
            };
            let (ok, max) = match self.summaries.remove(&c).expect("the first key") {
                Some((min, max)) => (
                    incoming.0 && incoming.1 <= min,
                    if incoming.1 > max { incoming.1 } else { max },
                ),
                // A node without records passes the wave on as it came.
                None => incoming,
            };
            if self.rank + 1 == self.n() {
                self.verdict(c, ok, out);
            } else {
                out.send(
                    self.ids[self.rank + 1],
                    Message::HeteroSort(HsortMsg::Check {
                        transfer: self.transfer,
                        epoch: self.epoch(),
                        cycle: c,
                        ok,
                        max,
                    }),
                );
            }
        }
    }

    /// Splitters' check: every rank reports its ends after a cycle straight to the last rank,
    /// which decides once it has them all (two hops, not a wave of `2p` through the snake).
    fn gather(&mut self, out: &mut Outputs) {
        let last = self.n() - 1;
        while let Some((c, ends)) = self.summaries.pop_first() {
            if self.rank == last {
                self.gathered.entry(c).or_default().insert(last, ends);
                self.decide(c, out);
            } else {
                self.mark("check_sent");
                let max = match ends {
                    Some((lo, hi)) => [lo, hi].concat().into(),
                    None => Bytes::new(),
                };
                out.send(
                    self.ids[last],
                    Message::HeteroSort(HsortMsg::Check {
                        transfer: self.transfer,
                        epoch: self.epoch(),
                        cycle: c,
                        ok: true,
                        max,
                    }),
                );
            }
        }
    }

    /// Splitters, at the last rank: with every rank's ends of cycle `c`, the set is sorted
    /// when each non-empty rank's smallest record is at least every earlier rank's largest.
    fn decide(&mut self, c: u32, out: &mut Outputs) {
        if self.gathered.get(&c).is_none_or(|g| g.len() < self.n()) {
            return;
        }
        let g = self.gathered.remove(&c).expect("checked above");
        let mut max: Option<Bytes> = None;
        let mut sorted = true;
        for (lo, hi) in g.into_values().flatten() {
            sorted &= max.as_ref().is_none_or(|m| *m <= lo);
            max = Some(match max {
                Some(m) if m > hi => m,
                _ => hi,
            });
        }
        self.verdict(c, sorted, out);
    }

    fn verdict(&mut self, c: u32, sorted: bool, out: &mut Outputs) {
        self.verdicts.insert(c, sorted);
        if self.splitters_mode {
            // The last rank tells every rank at once.
            if self.rank + 1 == self.n() {
                for &id in &self.ids[..self.rank] {
                    out.send(
                        id,
                        Message::HeteroSort(HsortMsg::Verdict {
                            transfer: self.transfer,
                            epoch: self.epoch(),
                            cycle: c,
                            sorted,
                        }),
                    );
                }
            }
        } else if self.rank > 0 {
            out.send(
                self.ids[self.rank - 1],
                Message::HeteroSort(HsortMsg::Verdict {
                    transfer: self.transfer,
                    epoch: self.epoch(),
                    cycle: c,
                    sorted,
                }),
            );
        }
        if sorted && self.stop_after.is_none() {
            // With Splitters no cycle starts before the verdict of the one before.
            self.stop_after = Some(if self.splitters_mode { c } else { c + 1 });
        }
        self.wave(out);
        self.advance(out);
    }

    /// After a cycle: finish, start the next one, or wait for a verdict.
    fn advance(&mut self, out: &mut Outputs) {
        if self.phase != Phase::Waiting {
            return;
        }
        let c = self.cycle;
        if self.stop_after == Some(c) {
            self.prepare(out);
            return;
        }
        let needed = if self.splitters_mode {
            Some(c)
        } else {
            c.checked_sub(1).filter(|&d| d >= 1)
        };
        if needed.is_none_or(|d| self.verdicts.get(&d) == Some(&false)) {
            self.start_cycle(c + 1, out);
        }
    }

    /// The epoch's last cycle is done: the first phase of the end. A rank tells the decider
    /// (the epoch's last rank) it holds its final range ([`HsortMsg::Ready`]); the decider
    /// counts its own and commits once every rank's is in.
    fn prepare(&mut self, out: &mut Outputs) {
        self.phase = Phase::Prepared;
        self.mark("ready");
        let last = self.n() - 1;
        if self.rank == last {
            self.readies.insert(last);
            self.maybe_commit(out);
        } else {
            out.send(
                self.ids[last],
                Message::HeteroSort(HsortMsg::Ready {
                    transfer: self.transfer,
                    epoch: self.epoch(),
                    cycle: self.cycle,
                }),
            );
        }
    }

    /// At the decider: with every rank's Ready in (and no failure heard, or the epoch would
    /// have been abandoned), the commit point: tell every rank, deliver, finish.
    fn maybe_commit(&mut self, out: &mut Outputs) {
        if self.phase != Phase::Prepared || self.readies.len() < self.n() {
            return;
        }
        for (q, &id) in self.ids.iter().enumerate() {
            if q != self.rank {
                out.send(
                    id,
                    Message::HeteroSort(HsortMsg::Commit {
                        transfer: self.transfer,
                        epoch: self.epoch(),
                        cycle: self.cycle,
                    }),
                );
            }
        }
        self.deliver(out);
    }

    /// Delivers the node's range and finishes.
    fn deliver(&mut self, out: &mut Outputs) {
        self.mark("commit");
        self.phase = Phase::Over;
        self.status = Status::Finished;
        let mut all = BytesMut::with_capacity(self.data.len() * self.record_len);
        for r in &self.data {
            all.extend_from_slice(r);
        }
        out.push(Output::Deliver {
            transfer: self.transfer,
            offset: 0,
            data: all.freeze(),
        });
        out.push(Output::Finished);
    }

    /// A prepared rank other than the decider, whose Host reports member `r` failed. Its Ready
    /// is out, so the decider may already have committed: it must not start a new epoch on its
    /// own. A failed decider leaves the end unknown (it may have committed to some ranks and
    /// not others): the rank aborts, naming it. Any other failure waits for the decider's
    /// answer, a commit or its failure notice (see [`recovery`]'s "The end").
    fn defer_failure(&mut self, r: usize, out: &mut Outputs) {
        if self.failed.contains(&r) || !self.deferred.insert(r) {
            return;
        }
        let last = self.n() - 1;
        if self.all[r] == self.ids[last] && !self.orphaned {
            // Tell the other live ranks this one is prepared and undecided (a Ready sent
            // to a rank that does not decide).
            self.orphaned = true;
            for q in 0..last {
                let id = self.ids[q];
                let gone = self.all.iter().position(|&n| n == id);
                if q != self.rank && !gone.is_some_and(|g| self.deferred.contains(&g)) {
                    out.send(
                        id,
                        Message::HeteroSort(HsortMsg::Ready {
                            transfer: self.transfer,
                            epoch: self.epoch(),
                            cycle: self.cycle,
                        }),
                    );
                }
            }
        }
        self.settle_orphan(out);
    }

    /// Orphaned: when every other live rank is prepared and undecided too, no live rank has
    /// delivered (one that had would have passed the commit on, ahead of anything else on
    /// the link, and sends no "undecided"): only the failed decider may have, and a failed
    /// member's output never counts (it is lost, its input restored). The rank starts the
    /// next epoch, as every other orphan does when it sees the same. A rank that is not
    /// prepared restarts on the decider's failure by itself, and its notice settles the
    /// orphans the same way sooner.
    fn settle_orphan(&mut self, out: &mut Outputs) {
        if !self.orphaned || self.phase != Phase::Prepared {
            return;
        }
        let last = self.n() - 1;
        let waiting = (0..last).any(|q| {
            let r = self.all.iter().position(|&n| n == self.ids[q]);
            q != self.rank
                && !r.is_some_and(|r| self.deferred.contains(&r))
                && !self.undecided.contains(&q)
        });
        if !waiting {
            let news: Vec<usize> = std::mem::take(&mut self.deferred).into_iter().collect();
            self.learn_failed(&news, out);
        }
    }

    /// Prepared and not the decider.
    fn awaits_commit(&self) -> bool {
        self.phase == Phase::Prepared && self.rank + 1 != self.n()
    }

    /// The current task's result.
    fn made(&mut self) -> Made {
        let made = self.job.take().and_then(|j| j.result());
        made.expect("a current task has its job")
    }

    /// Epoch rank `q`'s compressed frame did not decompress: its records cannot be used.
    fn corrupt(&mut self, q: usize, out: &mut Outputs) {
        let peer = self.ids[q];
        let kind = kind_of(K_ZSLICE);
        self.abort(AbortReason::CorruptPayload { peer, kind }, out);
    }

    fn abort(&mut self, reason: AbortReason, out: &mut Outputs) {
        self.phase = Phase::Over;
        self.status = Status::Aborted;
        // A task still running completes into nothing.
        self.task = None;
        out.push(Output::Aborted(reason));
    }

    fn on_message(
        &mut self,
        from: NodeId,
        msg: HsortMsg,
        out: &mut Outputs,
    ) -> Result<(), ProtocolError> {
        let kind = kind_of(msg.kind());
        msg.validate()
            .map_err(|source| ProtocolError::Frame { from, source })?;
        ProtocolError::check_transfer(from, kind, self.transfer, msg.run())?;
        let unexpected = |why| ProtocolError::UnexpectedMessage { from, kind, why };
        let Some(sender) = self.all.iter().position(|&n| n == from) else {
            return Err(unexpected("from a node outside the sort"));
        };
        // A member counted as failed is out: whatever it still sends is of no epoch here.
        if self.phase == Phase::Over || self.failed.contains(&sender) {
            return Ok(());
        }
        let inconsistent = |what| ProtocolError::Inconsistent { from, kind, what };
        if let Some(epoch) = msg.epoch() {
            // Its failure notice precedes a sender's frames of a new epoch on the link, so a
            // frame of a later epoch than this node's is a broken link order.
            if epoch > self.epoch() {
                return Err(inconsistent(
                    "a frame of an epoch whose failures were not announced",
                ));
            }
            if epoch < self.epoch() {
                return Ok(()); // an abandoned epoch's frame
            }
        }
        let q = self
            .ids
            .iter()
            .position(|&n| n == from)
            .expect("a live member is in the epoch's snake");
        match msg {
            HsortMsg::Failed { ranks, .. } => {
                let mut ranks = failed_ranks(&ranks);
                if ranks.last().is_some_and(|&r| r >= self.all.len()) {
                    return Err(inconsistent("a failed member rank outside the group"));
                }
                // A notice that names a new failure comes, at its origin, from a rank that
                // never sent its Ready of this epoch, or from the decider before its commit:
                // the epoch can no longer commit, so a prepared rank may start the next one,
                // with the failures it kept aside.
                // (A notice that names nothing new, one sent when its sender entered this
                // epoch, settles nothing.)
                if ranks.iter().any(|r| !self.failed.contains(r)) {
                    ranks.extend(std::mem::take(&mut self.deferred));
                }
                self.learn_failed(&ranks, out);
            }
            HsortMsg::Backup {
                record_len,
                records,
                more,
                ..
            } => {
                if usize::from(record_len) != self.record_len {
                    return Err(inconsistent("record length differs from this run's"));
                }
                if !self.holders_of[sender].contains(&self.mine) {
                    return Err(unexpected("a backup copy for a node that does not hold it"));
                }
                let held = self.held.entry(sender).or_default();
                if held.whole {
                    return Err(unexpected("a second backup copy from one member"));
                }
                let n = records.len() / self.record_len;
                held.records.extend(
                    (0..n).map(|i| records.slice(i * self.record_len..(i + 1) * self.record_len)),
                );
                if !more {
                    held.whole = true;
                    out.send(
                        from,
                        Message::HeteroSort(HsortMsg::BackupAck {
                            transfer: self.transfer,
                        }),
                    );
                }
            }
            HsortMsg::Samples {
                count,
                record_len,
                samples,
                ..
            } => {
                if !self.splitters_mode {
                    return Err(unexpected("samples in a run without splitters"));
                }
                if usize::from(record_len) != self.record_len {
                    return Err(inconsistent("record length differs from this run's"));
                }
                if self
                    .samples
                    .get(&sender)
                    .is_some_and(|s| s.0 == self.epoch())
                {
                    return Err(unexpected("a second set of samples in one epoch"));
                }
                let n = samples.len() / self.record_len;
                let s: Vec<Bytes> = (0..n)
                    .map(|i| samples.slice(i * self.record_len..(i + 1) * self.record_len))
                    .collect();
                if s.windows(2).any(|w| w[0] > w[1]) {
                    return Err(inconsistent("samples out of order"));
                }
                self.samples.insert(sender, (self.epoch(), count, s));
                self.maybe_begin(out);
            }
            HsortMsg::BackupAck { .. } => {
                if !self.holders_of[self.mine].clone().contains(&sender) {
                    return Err(unexpected(
                        "an acknowledgement from a node that holds no copy",
                    ));
                }
                if !self.acked.insert(sender) {
                    return Err(unexpected("a second acknowledgement of one copy"));
                }
                if self.copies_placed() {
                    self.mark("copies_placed");
                }
                self.maybe_begin(out);
                self.wave(out);
            }
            HsortMsg::Slice {
                cycle,
                count,
                record_len,
                handoff,
                records,
                more,
                packed,
                ..
            } => {
                if usize::from(record_len) != self.record_len {
                    return Err(ProtocolError::Inconsistent {
                        from,
                        kind,
                        what: "record length differs from this run's",
                    });
                }
                // A partner is at most one cycle ahead: it needs this node's frames to end one.
                let now = self.cycle.max(1);
                let current_open = matches!(self.phase, Phase::Trading | Phase::Backing);
                let ok_cycle = (cycle == now && current_open) || cycle == self.cycle + 1;
                if !ok_cycle {
                    return Err(unexpected("a slice of a cycle this node is not trading in"));
                }
                if !self.partners(cycle).contains(&q) {
                    return Err(unexpected("a slice from a node that is not a partner"));
                }
                if packed.is_some() && !self.exchange(cycle) {
                    return Err(unexpected(
                        "a compressed slice outside the splitters' exchange",
                    ));
                }
                let n = packed.map_or(records.len(), |raw| raw as usize) / self.record_len;
                let h = handoff as usize;
                let (had_slice, had_count) = match self.inbox.get(&(cycle, q)) {
                    Some(m) if m.done => {
                        return Err(unexpected("a second slice from the partner in one cycle"))
                    }
                    Some(m) => (m.slice.len() + m.packed_n, Some(m.count)),
                    None => (0, None),
                };
                if had_count.is_some_and(|k| k != count) {
                    return Err(inconsistent("a count that changed within one slice"));
                }
                if h > 0 && had_slice > 0 {
                    return Err(inconsistent("handoff records after the slice's records"));
                }
                if count < (had_slice + n - h) as u64 {
                    return Err(inconsistent("a count smaller than the records it trades"));
                }
                let rec = |i: usize| records.slice(i * self.record_len..(i + 1) * self.record_len);
                let m = self.inbox.entry((cycle, q)).or_insert_with(|| Inbound {
                    count,
                    handoff: Vec::new(),
                    slice: Vec::new(),
                    packed: Vec::new(),
                    packed_n: 0,
                    done: false,
                });
                if let Some(raw) = packed {
                    m.packed.push((raw, records));
                    m.packed_n += n;
                } else {
                    m.handoff.extend((0..h).map(rec));
                    m.slice.extend((h..n).map(rec));
                }
                m.done = !more;
                self.try_merge(out);
            }
            HsortMsg::Check { cycle, max, .. } if self.splitters_mode => {
                if self.rank + 1 != self.n() {
                    return Err(unexpected("a check for a rank that does not decide"));
                }
                if cycle > self.cycle + 1
                    || self
                        .gathered
                        .get(&cycle)
                        .is_some_and(|g| g.contains_key(&q))
                {
                    return Err(unexpected("a check of a cycle not awaited"));
                }
                let ends = match max.len() {
                    0 => None,
                    l if l == 2 * self.record_len => {
                        let (lo, hi) = (max.slice(..self.record_len), max.slice(self.record_len..));
                        if lo > hi {
                            return Err(inconsistent("a rank's smallest record above its largest"));
                        }
                        Some((lo, hi))
                    }
                    _ => return Err(inconsistent("a check that is not a rank's two ends")),
                };
                self.gathered.entry(cycle).or_default().insert(q, ends);
                self.decide(cycle, out);
            }
            HsortMsg::Check { cycle, ok, max, .. } => {
                if self.rank == 0 || q + 1 != self.rank {
                    return Err(unexpected("a check not from the rank below"));
                }
                if self.checks.contains_key(&cycle) || cycle > self.cycle + 1 {
                    return Err(unexpected("a check of a cycle not awaited"));
                }
                self.checks.insert(cycle, (ok, max));
                self.wave(out);
            }
            HsortMsg::Ready { cycle, .. } if self.rank + 1 != self.n() => {
                // An orphan's "undecided": kept by a prepared rank, dropped by one not yet
                // prepared (it will restart, or prepare and hear of the decider itself).
                if q + 1 == self.n() {
                    return Err(unexpected("a ready from the decider"));
                }
                if self.awaits_commit() && cycle == self.cycle {
                    self.undecided.insert(q);
                    self.settle_orphan(out);
                }
            }
            HsortMsg::Ready { cycle, .. } => {
                if self.stop_after != Some(cycle) || !self.readies.insert(q) {
                    return Err(unexpected("a ready of a cycle not awaited"));
                }
                self.maybe_commit(out);
            }
            HsortMsg::Commit { cycle, .. } => {
                if q == self.rank || self.rank + 1 == self.n() {
                    return Err(unexpected("a commit for the decider"));
                }
                if self.phase != Phase::Prepared || cycle != self.cycle {
                    return Err(unexpected("a commit before this rank was ready"));
                }
                if self.orphaned && q + 1 == self.n() {
                    // The failed decider's commit, late: this rank has told the others it is
                    // undecided, and they may settle on the next epoch without it.
                    return Ok(());
                }
                // Passed on to the other ranks: if the decider dies while sending its
                // commits, a rank that got one still tells the rest.
                let last = self.n() - 1;
                for (k, &id) in self.ids.iter().enumerate() {
                    if k != self.rank && k != q && k != last {
                        out.send(
                            id,
                            Message::HeteroSort(HsortMsg::Commit {
                                transfer: self.transfer,
                                epoch: self.epoch(),
                                cycle,
                            }),
                        );
                    }
                }
                self.deliver(out);
            }
            HsortMsg::Verdict { cycle, sorted, .. } => {
                let decider = if self.splitters_mode {
                    self.n() - 1
                } else {
                    self.rank + 1
                };
                if q != decider || q == self.rank {
                    return Err(unexpected("a verdict not from the rank above"));
                }
                if self.verdicts.contains_key(&cycle) || cycle > self.cycle {
                    return Err(unexpected("a verdict of a cycle not awaited"));
                }
                self.verdict(cycle, sorted, out);
            }
        }
        Ok(())
    }
}

impl Protocol for HeteroSort {
    fn node(&self) -> NodeId {
        self.me
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        self.now = now;
        match input {
            Input::Start => {
                if self.phase == Phase::Idle {
                    self.start(out);
                }
                Ok(())
            }
            Input::Message {
                from,
                message: Message::HeteroSort(msg),
            } => self.on_message(from, msg, out),
            Input::Message { from, message } => Err(ProtocolError::UnexpectedMessage {
                from,
                kind: message.kind(),
                why: "a sort node takes only HeteroSort messages",
            }),
            Input::Command(Command::ComputeDone { task }) => {
                let current = self.task == Some(task);
                if current && self.phase == Phase::Backing && self.zip.is_some() {
                    // The exchange's frames for other clusters are compressed: send them.
                    self.task = None;
                    self.zipped = self
                        .zip
                        .take()
                        .and_then(|j| j.result())
                        .expect("a current task has its job");
                    let slices = self.pending.take().expect("cut before the zip");
                    self.mark("zipped");
                    self.send_slices(self.cycle, slices, (usize::MAX, Vec::new()), out);
                    return Ok(());
                }
                if current && self.phase == Phase::Trading {
                    // A run of the Splitters exchange.
                    match self.made() {
                        Ok(run) => {
                            self.task = None;
                            self.runs.push(run);
                            self.feed(out);
                        }
                        Err(q) => self.corrupt(q, out),
                    }
                    Ok(())
                } else if current && matches!(self.phase, Phase::Computing | Phase::Backing) {
                    self.data = match self.made() {
                        Ok(data) => data,
                        Err(q) => {
                            self.corrupt(q, out);
                            return Ok(());
                        }
                    };
                    if self.phase == Phase::Computing {
                        self.computed(out);
                    } else {
                        self.task = None;
                        self.epoch_sorted = true;
                        self.send_samples(out);
                        self.maybe_begin(out);
                    }
                    Ok(())
                } else if task.0 < self.next_task && self.task != Some(task) {
                    Ok(()) // a task of an abandoned epoch (or after an abort)
                } else {
                    Err(ProtocolError::UnknownTask { task })
                }
            }
            Input::Timer(_) | Input::App(_) => Ok(()),
            Input::SendComplete { to, id } => Err(ProtocolError::UnknownSend { to, id }),
            Input::PeerFailed(peer) => {
                // Without backups no failure is restorable: `learn_failed` aborts.
                if let Some(r) = self.all.iter().position(|&n| n == peer) {
                    if self.awaits_commit() {
                        self.defer_failure(r, out);
                    } else {
                        self.learn_failed(&[r], out);
                    }
                }
                Ok(())
            }
        }
    }

    fn status(&self) -> Status {
        self.status
    }

    fn phases(&self) -> Vec<(&'static str, Time)> {
        self.phases.clone()
    }
}

#[cfg(test)]
mod slicing_names {
    use super::Slicing;

    /// One name per slicing: what files and job messages carry is what the command line takes.
    #[test]
    fn a_slicings_name_is_its_serde_name_and_parses_back() {
        for s in Slicing::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.name());
            assert_eq!(Slicing::from_name(s.name()), Some(s));
            let back: Slicing = serde_json::from_value(s.name().into()).unwrap();
            assert_eq!(back, s);
        }
        let old: Slicing = serde_json::from_value("speed".into()).unwrap();
        assert_eq!(
            (old, Slicing::from_name("speed")),
            (Slicing::Speed, Some(Slicing::Speed))
        );
        assert_eq!(Slicing::from_name("fast"), None);
    }
}
