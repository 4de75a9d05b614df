//! The third driver of windrose-proto's [`Host`]: point-to-point messages of the MPI library
//! (through a [`Transport`]) instead of the simulator's network or TCP.
//!
//! One MPI message carries one windrose frame, on a private communicator. The driver only
//! moves bytes: frames from [`Output::Send`] go out with `isend`, probed messages are decoded
//! with windrose-proto's codec and fed as inputs, timers come from a monotonic clock kept here.
//! The session (who starts a collective, readiness, reports) is the Host's.
//!
//! Every rank counts the windrose broadcasts of its communicator; the n-th one is transfer n
//! at every rank, so no rank needs to be told which transfer a call is. A rank may hear of the
//! next broadcast (its announcement, even its data) while still in the current one: what it
//! delivers is kept by transfer until the call for that transfer takes it.

use bytes::Bytes;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;
use windrose_model::{ClusterId, CostUnit, DenseCostMatrix, NodeId};
use windrose_proto::collective::{CollectiveSpec, TreeSpec};
use windrose_proto::frame::{decode_bytes, encode};
use windrose_proto::host::{App, AppRequest, Host, HostConfig, SessionMsg};
use windrose_proto::{
    Command, Input, Message, Output, Outputs, Protocol, Report, SendId, Time, TimerId, TransferId,
};
use windrose_trees::{Tree, TreeAlgorithm};

/// Point-to-point messages among the ranks of one communicator (a private duplicate).
pub trait Transport {
    /// An outstanding send.
    type Request;
    /// Starts sending `frame` to `to`; the driver keeps `frame` alive until `test` says done.
    fn isend(&mut self, to: u32, frame: &Bytes) -> Result<Self::Request, TransportError>;
    /// True once the send completed (the request is spent then).
    fn test(&mut self, request: &mut Self::Request) -> Result<bool, TransportError>;
    /// The next incoming message's source and length, if one is there; it must be taken
    /// with `recv` before the next probe.
    fn probe(&mut self) -> Result<Option<(u32, usize)>, TransportError>;
    /// Receives the message the last probe found into `buf` (its exact length).
    fn recv(&mut self, buf: &mut [u8]) -> Result<(), TransportError>;
}

/// A point-to-point call failed: which one and the MPI error code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportError {
    /// `isend`, `test`, `probe` or `recv`.
    pub call: &'static str,
    /// The MPI library's error code (or -1 from the driver).
    pub code: i32,
}

/// Why a broadcast failed at this rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BcastError {
    /// The MPI library refused a point-to-point call.
    Transport(TransportError),
    /// A peer sent something that is not a windrose frame of this group.
    BadFrame {
        /// The rank it came from.
        from: u32,
        /// What was wrong.
        why: String,
    },
    /// The root's message is longer than this rank's buffer (MPI_ERR_TRUNCATE); nothing
    /// past the buffer was written.
    Truncated {
        /// Bytes this rank's buffer holds.
        buffer: u64,
        /// The root's message is at least this long.
        at_least: u64,
    },
    /// The root's message is shorter than this rank's buffer (the ranks' counts disagree).
    Short {
        /// Bytes this rank's buffer holds.
        buffer: u64,
        /// Bytes the root sent.
        message: u64,
    },
    /// The collective was refused or aborted.
    Failed(String),
    /// Invalid arguments (root out of range).
    Argument(String),
}

impl fmt::Display for BcastError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BcastError::Transport(e) => write!(f, "MPI point-to-point call {} failed with code {}", e.call, e.code),
            BcastError::BadFrame { from, why } => write!(f, "bad frame from rank {from}: {why}"),
            BcastError::Truncated { buffer, at_least } => write!(
                f,
                "the root's message (at least {at_least} bytes) is longer than this rank's buffer ({buffer} bytes)"
            ),
            BcastError::Short { buffer, message } => write!(
                f,
                "the root's message ({message} bytes) is shorter than this rank's buffer ({buffer} bytes)"
            ),
            BcastError::Failed(why) => write!(f, "the broadcast failed: {why}"),
            BcastError::Argument(why) => write!(f, "bad argument: {why}"),
        }
    }
}

impl From<TransportError> for BcastError {
    fn from(e: TransportError) -> Self {
        BcastError::Transport(e)
    }
}

/// Largest frame body accepted: a segment's payload and its fixed fields.
const MAX_BODY: u32 = (1 << 20) + 64;

/// How this rank's part of a transfer ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Ended { finished: bool },
    Refused,
}

/// Bytes per segment for a message of `len` bytes: about eight segments per message so the
/// tree pipelines, between 64 KiB and 1 MiB (one frame per segment).
pub fn segment_bytes(len: u64) -> u64 {
    (len / 8).clamp(64 << 10, 1 << 20)
}

/// The cost guess before anything is measured: 1 hop between ranks on the same host, 10
/// between hosts. `hosts[r]` names rank r's host.
pub fn guessed_costs(hosts: &[i32]) -> DenseCostMatrix<f64> {
    DenseCostMatrix::from_fn(CostUnit::Hops, hosts.len(), |i, j| {
        if hosts[i] == hosts[j] {
            1.0
        } else {
            10.0
        }
    })
}

/// Counters of one group, for `WINDROSE_MPI_STATS`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames sent and their bytes.
    pub frames_sent: u64,
    /// Bytes of the frames sent.
    pub bytes_sent: u64,
    /// Frames received.
    pub frames_received: u64,
}

/// A send in flight: its request, the frame it must keep alive, and whom to tell when done.
struct InFlight<R> {
    request: R,
    _frame: Bytes,
    notify: Option<(NodeId, SendId)>,
}

/// One rank's driver of one communicator's [`Host`].
pub struct Driver<T: Transport> {
    host: Host,
    transport: T,
    rank: u32,
    size: u32,
    costs: DenseCostMatrix<f64>,
    trees: BTreeMap<u32, TreeSpec>,
    epoch: Instant,
    timers: BTreeMap<TimerId, Time>,
    pending: Vec<InFlight<T::Request>>,
    next_transfer: u32,
    deliveries: BTreeMap<TransferId, Vec<(u64, Bytes)>>,
    outcomes: BTreeMap<TransferId, Outcome>,
    joins_heard: u32,
    out: Outputs,
    stats: Stats,
    /// A fixed segment size (bytes) instead of [`segment_bytes`]'s choice.
    segment: Option<u64>,
}

impl<T: Transport> Driver<T> {
    /// The driver of `rank` among `hosts.len()` ranks (`hosts[r]`: rank r's host), started:
    /// its Host greets every peer.
    pub fn new(rank: u32, hosts: &[i32], transport: T, seed: u64) -> Result<Self, String> {
        let size = u32::try_from(hosts.len()).map_err(|_| "too many ranks".to_string())?;
        if rank >= size {
            return Err(format!("rank {rank} is not below the group size {size}"));
        }
        let members: Arc<[(NodeId, ClusterId)]> = hosts
            .iter()
            .enumerate()
            .map(|(r, &h)| (NodeId(r as u32), ClusterId(h.max(0) as u32)))
            .collect();
        let mut config = HostConfig::new(NodeId(rank), members, seed);
        // MPI reports failures itself, and a rank may stay away from MPI calls for as long as
        // it computes: no heartbeats, no silence detection, no idle timeout.
        config.heartbeat = None;
        config.idle_timeout = None;
        let host = Host::new(config).map_err(|e| format!("windrose host of rank {rank}: {e}"))?;
        let mut d = Driver {
            host,
            transport,
            rank,
            size,
            costs: guessed_costs(hosts),
            trees: BTreeMap::new(),
            epoch: Instant::now(),
            timers: BTreeMap::new(),
            pending: Vec::new(),
            next_transfer: 0,
            deliveries: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            joins_heard: 0,
            out: Outputs::new(),
            stats: Stats::default(),
            segment: None,
        };
        d.feed(Input::Start).map_err(|e| e.to_string())?;
        Ok(d)
    }

    /// Uses `bytes` per segment (and frame) for the broadcasts this rank roots: 1 ..= 1 MiB.
    pub fn set_segment_bytes(&mut self, bytes: u64) -> Result<(), String> {
        if !(1..=1 << 20).contains(&bytes) {
            return Err(format!(
                "segment size {bytes} bytes: expected 1 to 1048576 (one frame per segment)"
            ));
        }
        self.segment = Some(bytes);
        Ok(())
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// The tree for broadcasts from `root` (built once per root from the cost guess).
    fn tree(&mut self, root: u32) -> Result<TreeSpec, BcastError> {
        if let Some(t) = self.trees.get(&root) {
            return Ok(t.clone());
        }
        let tree: Tree = TreeAlgorithm::BalancedPath
            .build(&self.costs, None, NodeId(root))
            .map_err(|e| BcastError::Failed(format!("no tree from rank {root}: {e}")))?;
        let spec = TreeSpec::of(&tree);
        self.trees.insert(root, spec.clone());
        Ok(spec)
    }

    /// Broadcasts `buf` from `root`: the root's bytes end up in every rank's `buf`. Blocks
    /// (making progress) until this rank's part is done.
    pub fn bcast(&mut self, buf: &mut [u8], root: u32) -> Result<(), BcastError> {
        if root >= self.size {
            return Err(BcastError::Argument(format!(
                "root {root} is not a rank of this communicator (size {})",
                self.size
            )));
        }
        let t = TransferId(self.next_transfer);
        self.next_transfer = self.next_transfer.wrapping_add(1);
        if root == self.rank {
            let len = buf.len() as u64;
            let seg = self.segment.unwrap_or_else(|| segment_bytes(len));
            let spec = CollectiveSpec::Broadcast {
                tree: self.tree(root)?,
                segment_bytes: seg,
                max_frame_payload: seg as u32,
            };
            let start = Input::App(App::new(AppRequest::StartCollective {
                spec,
                data: Bytes::copy_from_slice(buf),
                transfer: Some(t),
            }));
            self.feed(start)?;
        }
        let outcome = loop {
            if let Some(o) = self.outcomes.remove(&t) {
                break o;
            }
            if !self.progress()? {
                std::thread::yield_now();
            }
        };
        let pieces = self.deliveries.remove(&t).unwrap_or_default();
        match outcome {
            Outcome::Refused => {
                return Err(BcastError::Failed(format!("transfer {t} was refused")));
            }
            Outcome::Ended { finished: false } => {
                return Err(BcastError::Failed(format!("transfer {t} aborted")));
            }
            Outcome::Ended { finished: true } => {}
        }
        if root == self.rank {
            return Ok(());
        }
        let cap = buf.len() as u64;
        let mut got = 0u64;
        for (offset, data) in pieces {
            let end = offset + data.len() as u64;
            if end > cap {
                return Err(BcastError::Truncated {
                    buffer: cap,
                    at_least: end,
                });
            }
            buf[offset as usize..end as usize].copy_from_slice(&data);
            got += data.len() as u64;
        }
        if got != cap {
            return Err(BcastError::Short {
                buffer: cap,
                message: got,
            });
        }
        Ok(())
    }

    /// One round: every message that is there, send completions, due timers. True when
    /// something happened.
    pub fn progress(&mut self) -> Result<bool, BcastError> {
        let mut busy = false;
        // A bounded batch, so sends and timers get their turn under a flood.
        for _ in 0..64 {
            let Some((from, len)) = self.transport.probe()? else {
                break;
            };
            busy = true;
            let mut frame = vec![0u8; len];
            self.transport.recv(&mut frame)?;
            self.on_frame(from, Bytes::from(frame))?;
        }
        let mut i = 0;
        while i < self.pending.len() {
            if self.transport.test(&mut self.pending[i].request)? {
                busy = true;
                let sent = self.pending.swap_remove(i);
                if let Some((to, id)) = sent.notify {
                    self.feed(Input::SendComplete { to, id })?;
                }
            } else {
                i += 1;
            }
        }
        let now = self.now();
        let due: Vec<TimerId> = self
            .timers
            .iter()
            .filter(|(_, &at)| at <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            busy = true;
            self.timers.remove(&id);
            self.feed(Input::Timer(id))?;
        }
        Ok(busy)
    }

    /// True when this rank owes no peer anything: every collective closed, every send
    /// completed, every peer's greeting received (so no message is left unreceived).
    pub fn quiescent(&self) -> bool {
        self.host.running().next().is_none()
            && self.pending.is_empty()
            && self.joins_heard + 1 >= self.size
    }

    fn on_frame(&mut self, from: u32, frame: Bytes) -> Result<(), BcastError> {
        self.stats.frames_received += 1;
        let bad = |why: String| BcastError::BadFrame { from, why };
        if from >= self.size {
            return Err(bad(format!("rank {from} is not in this group")));
        }
        let (message, len) = decode_bytes(&frame, MAX_BODY)
            .map_err(|e| bad(e.to_string()))?
            .ok_or_else(|| bad(format!("a truncated frame of {} bytes", frame.len())))?;
        if len != frame.len() {
            return Err(bad(format!(
                "{} bytes after a frame of {len}",
                frame.len() - len
            )));
        }
        if let Message::Session(s) = &message {
            if matches!(SessionMsg::from_frame(s), Ok(SessionMsg::Join)) {
                self.joins_heard += 1;
            }
        }
        self.feed(Input::Message {
            from: NodeId(from),
            message,
        })
    }

    /// Hands `input` to the host and performs what it asks.
    fn feed(&mut self, input: Input) -> Result<(), BcastError> {
        let now = self.now();
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        let r = self.host.handle(now, input, &mut out);
        let mut result =
            r.map_err(|e| BcastError::Failed(format!("the host refused an input: {e}")));
        let mut follow_ups = Vec::new();
        for o in out.drain() {
            match o {
                Output::Send(tx) => {
                    let frame = match encode(&tx.message) {
                        Ok(f) => f,
                        Err(e) => {
                            result = Err(BcastError::Failed(format!("cannot encode a frame: {e}")));
                            continue;
                        }
                    };
                    match self.transport.isend(tx.to.0, &frame) {
                        Ok(req) => {
                            self.stats.frames_sent += 1;
                            self.stats.bytes_sent += frame.len() as u64;
                            self.pending.push(InFlight {
                                request: req,
                                _frame: frame,
                                notify: tx.notify.map(|id| (tx.to, id)),
                            });
                        }
                        Err(e) => result = Err(e.into()),
                    }
                }
                Output::SetTimer { timer, at } => {
                    self.timers.insert(timer, at);
                }
                Output::CancelTimer(timer) => {
                    self.timers.remove(&timer);
                }
                Output::Deliver {
                    transfer,
                    offset,
                    data,
                } => self
                    .deliveries
                    .entry(transfer)
                    .or_default()
                    .push((offset, data)),
                // A broadcast computes nothing: the work is done as soon as it is asked.
                Output::Compute(task) => {
                    follow_ups.push(Input::Command(Command::ComputeDone { task: task.task }))
                }
                Output::Report(Report::CollectiveEnded { transfer, finished }) => {
                    self.outcomes
                        .entry(transfer)
                        .or_insert(Outcome::Ended { finished });
                }
                Output::Report(Report::CollectiveRefused { transfer }) => {
                    self.outcomes.insert(transfer, Outcome::Refused);
                }
                Output::Report(_) | Output::Finished | Output::Aborted(_) => {}
            }
        }
        self.out = out;
        for input in follow_ups {
            self.feed(input)?;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::rc::Rc;

    /// Every rank's mailbox: (from, frame), in order per sender as MPI guarantees.
    type Net = Rc<RefCell<Vec<VecDeque<(u32, Bytes)>>>>;

    /// An in-memory transport: sends land in the peer's mailbox at once.
    struct Loopback {
        me: u32,
        net: Net,
        probed: Option<(u32, Bytes)>,
    }

    impl Transport for Loopback {
        type Request = ();
        fn isend(&mut self, to: u32, frame: &Bytes) -> Result<(), TransportError> {
            self.net.borrow_mut()[to as usize].push_back((self.me, frame.clone()));
            Ok(())
        }
        fn test(&mut self, _: &mut ()) -> Result<bool, TransportError> {
            Ok(true)
        }
        fn probe(&mut self) -> Result<Option<(u32, usize)>, TransportError> {
            let m = self.net.borrow_mut()[self.me as usize].pop_front();
            Ok(m.map(|(from, f)| {
                let len = f.len();
                self.probed = Some((from, f));
                (from, len)
            }))
        }
        fn recv(&mut self, buf: &mut [u8]) -> Result<(), TransportError> {
            let (_, f) = self.probed.take().ok_or(TransportError {
                call: "recv",
                code: -1,
            })?;
            buf.copy_from_slice(&f);
            Ok(())
        }
    }

    fn group(hosts: &[i32]) -> (Net, Vec<Driver<Loopback>>) {
        let net: Net = Rc::new(RefCell::new(vec![VecDeque::new(); hosts.len()]));
        let drivers = (0..hosts.len() as u32)
            .map(|r| {
                let t = Loopback {
                    me: r,
                    net: net.clone(),
                    probed: None,
                };
                Driver::new(r, hosts, t, 7).unwrap()
            })
            .collect();
        (net, drivers)
    }

    /// Runs one broadcast at every rank, single-threaded: each rank's blocking call is
    /// emulated by its transfer's outcome, the others progressing meanwhile.
    fn run(drivers: &mut [Driver<Loopback>], bufs: &mut [Vec<u8>], root: u32) {
        // The root starts (its call returns as soon as its machine has pushed every frame),
        // then every rank runs its call; the others are progressed between steps by calling
        // progress on them, as their own blocking calls would.
        let n = drivers.len();
        let mut done = vec![false; n];
        let t = TransferId(drivers[0].next_transfer);
        for d in drivers.iter_mut() {
            d.next_transfer += 1;
        }
        let root_data = Bytes::copy_from_slice(&bufs[root as usize]);
        let seg = drivers[root as usize]
            .segment
            .unwrap_or_else(|| segment_bytes(root_data.len() as u64));
        let spec = CollectiveSpec::Broadcast {
            tree: drivers[root as usize].tree(root).unwrap(),
            segment_bytes: seg,
            max_frame_payload: seg as u32,
        };
        drivers[root as usize]
            .feed(Input::App(App::new(AppRequest::StartCollective {
                spec,
                data: root_data,
                transfer: Some(t),
            })))
            .unwrap();
        for _ in 0..10_000 {
            for (r, d) in drivers.iter_mut().enumerate() {
                d.progress().unwrap();
                if !done[r] && d.outcomes.contains_key(&t) {
                    done[r] = true;
                    assert_eq!(
                        d.outcomes.remove(&t),
                        Some(Outcome::Ended { finished: true })
                    );
                    if r as u32 != root {
                        for (off, data) in d.deliveries.remove(&t).unwrap_or_default() {
                            bufs[r][off as usize..off as usize + data.len()].copy_from_slice(&data);
                        }
                    }
                }
            }
            if done.iter().all(|&x| x) {
                return;
            }
        }
        panic!("broadcast from {root} did not end: {done:?}");
    }

    #[test]
    fn every_root_gets_every_byte_to_every_rank() {
        let hosts = [0, 0, 2, 2, 4];
        let (_net, mut drivers) = group(&hosts);
        for (i, len) in [1usize, 1000, 300_000, 2_000_000].into_iter().enumerate() {
            for root in 0..hosts.len() as u32 {
                let want: Vec<u8> = (0..len)
                    .map(|k| {
                        (k as u32)
                            .wrapping_mul(31)
                            .wrapping_add(root * 7 + i as u32) as u8
                    })
                    .collect();
                let mut bufs: Vec<Vec<u8>> = (0..hosts.len())
                    .map(|r| {
                        if r as u32 == root {
                            want.clone()
                        } else {
                            vec![0xEE; len]
                        }
                    })
                    .collect();
                run(&mut drivers, &mut bufs, root);
                for (r, b) in bufs.iter().enumerate() {
                    assert!(b == &want, "rank {r} differs (root {root}, {len} bytes)");
                }
            }
        }
        // Everything closed: nobody owes anything, and every frame was received.
        for _ in 0..100 {
            for d in drivers.iter_mut() {
                d.progress().unwrap();
            }
        }
        for (r, d) in drivers.iter().enumerate() {
            assert!(d.quiescent(), "rank {r} is not quiescent");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Any group (3 to 9 ranks on 1 to 4 hosts), any root, any length, any segment size:
        /// every rank ends with the root's bytes, and the group settles afterwards.
        #[test]
        fn any_group_root_and_length(
            hosts in proptest::collection::vec(0i32..4, 3..10),
            root_pick in 0u32..1000,
            len in 1usize..600_000,
            seg in proptest::option::of(1000u64..200_000),
            salt in 0u8..255,
        ) {
            let (_net, mut drivers) = group(&hosts);
            let root = root_pick % hosts.len() as u32;
            if let Some(seg) = seg {
                drivers[root as usize].set_segment_bytes(seg).unwrap();
            }
            let want: Vec<u8> = (0..len).map(|k| (k as u8).wrapping_mul(salt) ^ salt).collect();
            let mut bufs: Vec<Vec<u8>> = (0..hosts.len())
                .map(|r| if r as u32 == root { want.clone() } else { vec![!salt; len] })
                .collect();
            run(&mut drivers, &mut bufs, root);
            for (r, b) in bufs.iter().enumerate() {
                proptest::prop_assert!(b == &want, "rank {} differs", r);
            }
            for _ in 0..50 {
                for d in drivers.iter_mut() {
                    d.progress().unwrap();
                }
            }
            for (r, d) in drivers.iter().enumerate() {
                proptest::prop_assert!(d.quiescent(), "rank {} owes something", r);
            }
        }
    }

    /// A rank still in one broadcast hears of the next ones (announcements, data): each
    /// transfer's bytes are kept apart and handed to the call for that transfer.
    #[test]
    fn overlapping_broadcasts_stay_apart() {
        let hosts = [0, 1, 2, 3];
        let (_net, mut drivers) = group(&hosts);
        let lens = [700_000usize, 5, 1_300_000];
        let roots = [0u32, 2, 0];
        let data: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(t, &len)| (0..len).map(|k| (k * 7 + t * 13) as u8).collect())
            .collect();
        // Every root starts its broadcasts at once, before any other rank has moved.
        for (t, (&root, d)) in roots.iter().zip(&data).enumerate() {
            let dr = &mut drivers[root as usize];
            let seg = segment_bytes(d.len() as u64);
            let spec = CollectiveSpec::Broadcast {
                tree: dr.tree(root).unwrap(),
                segment_bytes: seg,
                max_frame_payload: seg as u32,
            };
            dr.feed(Input::App(App::new(AppRequest::StartCollective {
                spec,
                data: Bytes::copy_from_slice(d),
                transfer: Some(TransferId(t as u32)),
            })))
            .unwrap();
        }
        for d in drivers.iter_mut() {
            d.next_transfer = 3;
        }
        for _ in 0..10_000 {
            for d in drivers.iter_mut() {
                d.progress().unwrap();
            }
            if drivers.iter().all(|d| d.outcomes.len() == 3) {
                break;
            }
        }
        for (r, d) in drivers.iter_mut().enumerate() {
            for (t, want) in data.iter().enumerate() {
                let id = TransferId(t as u32);
                assert_eq!(
                    d.outcomes.remove(&id),
                    Some(Outcome::Ended { finished: true }),
                    "rank {r}, transfer {t}"
                );
                if roots[t] as usize == r {
                    continue;
                }
                let mut got = vec![0u8; want.len()];
                for (off, bytes) in d.deliveries.remove(&id).unwrap_or_default() {
                    got[off as usize..off as usize + bytes.len()].copy_from_slice(&bytes);
                }
                assert!(&got == want, "rank {r}, transfer {t}");
            }
            assert!(d.deliveries.is_empty());
        }
    }

    #[test]
    fn a_foreign_frame_is_reported_with_its_sender() {
        let (net, mut drivers) = group(&[0, 0, 0]);
        net.borrow_mut()[1].push_back((2, Bytes::from_static(b"not a frame at all")));
        let mut found = None;
        for _ in 0..10 {
            if let Err(e) = drivers[1].progress() {
                found = Some(e);
                break;
            }
        }
        match found {
            Some(BcastError::BadFrame { from: 2, .. }) => {}
            other => panic!("expected a bad frame from rank 2, got {other:?}"),
        }
    }

    #[test]
    fn a_fixed_segment_size_is_used_and_checked() {
        let (_net, mut drivers) = group(&[0, 0, 0]);
        for bad in [0, (1 << 20) + 1] {
            let e = drivers[0].set_segment_bytes(bad).unwrap_err();
            assert!(e.contains(&bad.to_string()), "{e}");
        }
        // 300 kB in 1000-byte segments: 300 data frames down each tree edge.
        drivers[0].set_segment_bytes(1000).unwrap();
        let want: Vec<u8> = (0..300_000).map(|k| (k % 251) as u8).collect();
        let mut bufs = [want.clone(), vec![0; 300_000], vec![0; 300_000]];
        let before: Vec<u64> = drivers.iter().map(|d| d.stats().frames_received).collect();
        let t = TransferId(drivers[0].next_transfer);
        drivers[0].next_transfer += 1;
        let spec = CollectiveSpec::Broadcast {
            tree: drivers[0].tree(0).unwrap(),
            segment_bytes: drivers[0].segment.unwrap(),
            max_frame_payload: 1000,
        };
        drivers[0]
            .feed(Input::App(App::new(AppRequest::StartCollective {
                spec,
                data: Bytes::from(want.clone()),
                transfer: Some(t),
            })))
            .unwrap();
        for d in drivers.iter_mut().skip(1) {
            d.next_transfer += 1;
        }
        for _ in 0..10_000 {
            for d in drivers.iter_mut() {
                d.progress().unwrap();
            }
            if drivers.iter().all(|d| d.outcomes.contains_key(&t)) {
                break;
            }
        }
        for r in 1..3 {
            for (off, data) in drivers[r].deliveries.remove(&t).unwrap() {
                bufs[r][off as usize..off as usize + data.len()].copy_from_slice(&data);
            }
            assert!(bufs[r] == want, "rank {r}");
            let frames = drivers[r].stats().frames_received - before[r];
            assert!(frames >= 300, "rank {r} got {frames} frames");
        }
    }

    #[test]
    fn a_root_outside_the_group_is_refused() {
        let (_net, mut drivers) = group(&[0, 0, 0]);
        let mut buf = vec![0u8; 10];
        assert!(matches!(
            drivers[0].bcast(&mut buf, 3),
            Err(BcastError::Argument(_))
        ));
    }

    #[test]
    fn the_guess_puts_ranks_of_one_host_close() {
        use windrose_model::LinkCosts;
        let c = guessed_costs(&[0, 0, 2]);
        assert_eq!(c.cost(NodeId(0), NodeId(1)), 1.0);
        assert_eq!(c.cost(NodeId(1), NodeId(2)), 10.0);
        assert_eq!(segment_bytes(0), 64 << 10);
        assert_eq!(segment_bytes(4 << 20), 512 << 10);
        assert_eq!(segment_bytes(64 << 20), 1 << 20);
    }
}
