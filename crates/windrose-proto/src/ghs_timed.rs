//! GHS and its repairs in the *message-delay model* of their analysis: every message takes its
//! link's latency, nothing else costs time (no bandwidth, no processing, no session), links are
//! FIFO. A reference run for what the protocol itself costs (messages by kind, the time until
//! the last node knows the end, and the message delays on the chain that decided it), small
//! enough to take thousands of nodes where the flow-level simulator with Hosts takes tens.
//!
//! **The critical chain.** Each message carries a hop count: one for a message a node sends
//! on its own (its spontaneous wake-up, a weight change fed to it), one more than the message
//! being handled for a message sent while handling it (a deferred message retried then counts
//! from the message that let it through, which is the one that decided the time). A run's
//! `chain` is the hop count of the message whose handling made the last node settle: the
//! message delays on the causal path that ended the run, to set beside GHS's time bound
//! (`5 n log2 n` delays, [`ghs_time_bound`]).
//!
//! Deterministic by construction: times are whole nanoseconds, ties are broken by send order,
//! and nothing is random.

use crate::ghs::{Ghs, GhsMsg};
use crate::ghs_repair::{MaintainedMst, MstNodeMsg};
use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};
use windrose_model::NodeId;

/// A machine the timed run drives.
pub trait TimedMachine {
    /// Its message.
    type Msg: Clone;
    /// The spontaneous start.
    fn wake(&mut self, out: &mut Vec<(NodeId, Self::Msg)>);
    /// A message from `from`; an error names why it was refused.
    fn take(
        &mut self,
        from: NodeId,
        msg: Self::Msg,
        out: &mut Vec<(NodeId, Self::Msg)>,
    ) -> Result<(), String>;
    /// The node knows its tree is complete (built, or repaired).
    fn settled(&self) -> bool;
    /// The message's kind, as counted.
    fn kind(msg: &Self::Msg) -> &'static str;
    /// Bytes the message takes on the wire as a frame (0: not counted).
    fn bytes(_msg: &Self::Msg) -> u64 {
        0
    }
}

impl TimedMachine for Ghs {
    type Msg = GhsMsg;
    fn wake(&mut self, out: &mut Vec<(NodeId, GhsMsg)>) {
        self.start(out)
    }
    fn take(
        &mut self,
        from: NodeId,
        msg: GhsMsg,
        out: &mut Vec<(NodeId, GhsMsg)>,
    ) -> Result<(), String> {
        self.handle(from, msg, out).map_err(|e| e.to_string())
    }
    fn settled(&self) -> bool {
        self.is_done()
    }
    fn kind(msg: &GhsMsg) -> &'static str {
        msg.name()
    }
}

/// Repair kinds as counted beside GHS's (whose `test`, `accept`, `reject` they share).
const REPAIR_KINDS: [&str; 7] = [
    "repair_request",
    "repair_begin",
    "repair_test",
    "repair_accept",
    "repair_reject",
    "repair_echo",
    "repair_stable",
];

impl TimedMachine for MaintainedMst {
    type Msg = MstNodeMsg;
    fn wake(&mut self, out: &mut Vec<(NodeId, MstNodeMsg)>) {
        self.start(out)
    }
    fn take(
        &mut self,
        from: NodeId,
        msg: MstNodeMsg,
        out: &mut Vec<(NodeId, MstNodeMsg)>,
    ) -> Result<(), String> {
        self.handle(from, msg, out).map_err(|e| e.to_string())
    }
    fn settled(&self) -> bool {
        self.is_stable()
    }
    /// Its [`MstFrame`](crate::ghs_repair::MstFrame): header, fixed body and a row's payload.
    fn bytes(msg: &MstNodeMsg) -> u64 {
        use crate::frame::Family;
        let f = crate::ghs_repair::MstFrame::Node(msg.clone());
        let k = crate::ghs_repair::MstFrame::kind_of(f.kind());
        (k.frame_overhead() + f.payload().map_or(0, |p| p.len())) as u64
    }
    fn kind(msg: &MstNodeMsg) -> &'static str {
        match msg {
            MstNodeMsg::Hello { .. } => "hello",
            MstNodeMsg::Row { .. } => "row",
            MstNodeMsg::Ghs { msg, .. } => msg.name(),
            MstNodeMsg::Repair { msg, .. } => REPAIR_KINDS[msg.kind_index()],
            MstNodeMsg::Recover { msg, .. } => msg.name(),
        }
    }
}

/// GHS's bound on its time, in message delays, with every node awake at the start:
/// `5 n log2 n` (Gallager, Humblet & Spira 1983), 0 for one node.
pub fn ghs_time_bound(n: usize) -> f64 {
    if n < 2 {
        0.0
    } else {
        5.0 * n as f64 * (n as f64).log2()
    }
}

/// GHS's bound on its messages: `5 n log2 n + 2 e` (the classic seven kinds).
pub fn ghs_message_bound(n: usize, e: usize) -> f64 {
    ghs_time_bound(n) + 2.0 * e as f64
}

/// The bound on GHS's messages (the classic seven kinds) with a test window of `window`
/// ([`Ghs::with_test_window`]) on a component whose node degrees are `degrees` and which has
/// `e` edges: [`ghs_message_bound`] for a window of 1, else
/// `(3 n + 2 sum_v min(window, deg v)) log2 n + 4 e` (see the
/// [GHS module docs](crate::ghs#the-test-window) for the proof).
pub fn ghs_window_message_bound(
    degrees: impl IntoIterator<Item = usize>,
    e: usize,
    window: u32,
) -> f64 {
    let (mut n, mut accepted) = (0usize, 0usize);
    for d in degrees {
        n += 1;
        accepted += d.min(window as usize);
    }
    if window <= 1 {
        return ghs_message_bound(n, e);
    }
    if n < 2 {
        return 0.0;
    }
    (3.0 * n as f64 + 2.0 * accepted as f64) * (n as f64).log2() + 4.0 * e as f64
}

/// What one [`TimedRun::run`] cost, from its first input to the last node settling.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// When the run's inputs were given, s.
    pub start_s: f64,
    /// When the last node settled (its last change from unsettled to settled), s; the start
    /// if none did.
    pub end_s: f64,
    /// Message delays on the chain that ended the run (see the module docs).
    pub chain: u32,
    /// Messages sent, by kind.
    pub by_kind: BTreeMap<&'static str, u64>,
    /// Bytes of the messages sent as frames ([`TimedMachine::bytes`]; 0 for GHS alone).
    pub bytes: u64,
    /// With [`TimedRun::trace`]: the chain itself, first message first.
    pub path: Vec<Hop>,
}

/// One message of a traced chain.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Hop {
    /// The sender.
    pub from: NodeId,
    /// The receiver.
    pub to: NodeId,
    /// Its kind.
    pub kind: &'static str,
    /// Its delay, s.
    pub delay_s: f64,
}

impl Span {
    /// Seconds from the inputs to the last node settling.
    pub fn seconds(&self) -> f64 {
        self.end_s - self.start_s
    }

    /// Messages sent in all.
    pub fn messages(&self) -> u64 {
        self.by_kind.values().sum()
    }
}

struct InFlight<M> {
    at_ns: u64,
    seq: u64,
    from: NodeId,
    to: NodeId,
    hops: u32,
    /// Its index in the trace (unused without one).
    id: u32,
    msg: M,
}

impl<M> PartialEq for InFlight<M> {
    fn eq(&self, o: &Self) -> bool {
        (self.at_ns, self.seq) == (o.at_ns, o.seq)
    }
}
impl<M> Eq for InFlight<M> {}
impl<M> PartialOrd for InFlight<M> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<M> Ord for InFlight<M> {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.at_ns, self.seq).cmp(&(o.at_ns, o.seq))
    }
}

/// Machines of nodes `0..n` joined by links of the given latencies (see the module docs).
pub struct TimedRun<M: TimedMachine, L: Fn(NodeId, NodeId) -> f64> {
    nodes: Vec<M>,
    latency_s: L,
    now_ns: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<InFlight<M::Msg>>>,
    /// When the first input since the last run was given.
    start_ns: Option<u64>,
    /// Messages sent since the last run, by kind.
    by_kind: BTreeMap<&'static str, u64>,
    bytes: u64,
    scratch: Vec<(NodeId, M::Msg)>,
    /// With tracing: every message sent, and the one whose handling sent it.
    trace: Option<Vec<(Hop, u32)>>,
    /// The traced message being handled (`NONE`: an input).
    handling: u32,
}

const NONE: u32 = u32::MAX;

fn ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

impl<M: TimedMachine, L: Fn(NodeId, NodeId) -> f64> TimedRun<M, L> {
    /// Node `i` is `nodes[i]`; a message from `a` to `b` takes `latency_s(a, b)` seconds
    /// (finite, >= 0, fixed for the run, so links are FIFO).
    pub fn new(nodes: Vec<M>, latency_s: L) -> Self {
        TimedRun {
            nodes,
            latency_s,
            now_ns: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            start_ns: None,
            by_kind: BTreeMap::new(),
            bytes: 0,
            scratch: Vec::new(),
            trace: None,
            handling: NONE,
        }
    }

    /// Keeps every message's cause from now on, so that [`run`](Self::run) returns the chain
    /// itself ([`Span::path`]); memory grows with the messages (small runs only).
    pub fn trace(mut self) -> Self {
        self.trace = Some(Vec::new());
        self
    }

    /// The machines.
    pub fn nodes(&self) -> &[M] {
        &self.nodes
    }

    /// Current time, s.
    pub fn now_s(&self) -> f64 {
        self.now_ns as f64 / 1e9
    }

    fn post(&mut self, from: NodeId, hops: u32) {
        for (to, msg) in std::mem::take(&mut self.scratch) {
            *self.by_kind.entry(M::kind(&msg)).or_default() += 1;
            self.bytes += M::bytes(&msg);
            let d = (self.latency_s)(from, to);
            debug_assert!(d.is_finite() && d >= 0.0, "latency {from}->{to}: {d}");
            let mut id = NONE;
            if let Some(t) = &mut self.trace {
                id = t.len() as u32;
                let kind = M::kind(&msg);
                t.push((
                    Hop {
                        from,
                        to,
                        kind,
                        delay_s: d,
                    },
                    self.handling,
                ));
            }
            self.queue.push(Reverse(InFlight {
                at_ns: self.now_ns + ns(d),
                seq: self.seq,
                from,
                to,
                hops,
                id,
                msg,
            }));
            self.seq += 1;
        }
    }

    /// Gives node `node` an input now (its wake-up, a weight change...); what it sends counts
    /// one message delay.
    pub fn input<E>(
        &mut self,
        node: NodeId,
        f: impl FnOnce(&mut M, &mut Vec<(NodeId, M::Msg)>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.start_ns.get_or_insert(self.now_ns);
        self.handling = NONE;
        let mut out = std::mem::take(&mut self.scratch);
        let r = f(&mut self.nodes[node.index()], &mut out);
        self.scratch = out;
        self.post(node, 1);
        r
    }

    /// Wakes every node now.
    pub fn wake_all(&mut self) {
        for v in 0..self.nodes.len() {
            let _ = self.input::<()>(NodeId::from(v), |m, out| {
                m.wake(out);
                Ok(())
            });
        }
    }

    /// Delivers every message until none is in flight; what the inputs given since the last
    /// run cost. An error names the refused message.
    pub fn run(&mut self) -> Result<Span, String> {
        let start_ns = self.start_ns.take().unwrap_or(self.now_ns);
        let mut end = (start_ns, 0u32, NONE);
        while let Some(Reverse(m)) = self.queue.pop() {
            self.now_ns = m.at_ns;
            let node = &mut self.nodes[m.to.index()];
            let was = node.settled();
            let mut out = std::mem::take(&mut self.scratch);
            let kind = M::kind(&m.msg);
            node.take(m.from, m.msg, &mut out).map_err(|e| {
                format!(
                    "at {:.6} s, node {} refused a {kind} from {}: {e}",
                    m.at_ns as f64 / 1e9,
                    m.to,
                    m.from
                )
            })?;
            if !was && node.settled() && (m.at_ns, m.hops) > (end.0, end.1) {
                end = (m.at_ns, m.hops, m.id);
            }
            self.scratch = out;
            self.handling = m.id;
            self.post(m.to, m.hops + 1);
        }
        let mut path = Vec::new();
        if let Some(t) = &self.trace {
            let mut id = end.2;
            while id != NONE {
                path.push(t[id as usize].0);
                id = t[id as usize].1;
            }
            path.reverse();
        }
        Ok(Span {
            start_s: start_ns as f64 / 1e9,
            end_s: end.0 as f64 / 1e9,
            chain: end.1,
            by_kind: std::mem::take(&mut self.by_kind),
            bytes: std::mem::take(&mut self.bytes),
            path,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path 0 - 1 - 2 with 1 s links: the timed run's numbers follow by hand.
    #[test]
    fn a_path_of_three() {
        let n = NodeId;
        let edges = [(0u32, 1u32, 1.0), (1, 2, 2.0)];
        let machines: Vec<Ghs> = (0..3u32)
            .map(|v| {
                let mine = edges.iter().filter_map(|&(a, b, w)| match v {
                    _ if v == a => Some((n(b), w)),
                    _ if v == b => Some((n(a), w)),
                    _ => None,
                });
                Ghs::new(n(v), mine).unwrap()
            })
            .collect();
        let mut run = TimedRun::new(machines, |_, _| 1.0).trace();
        run.wake_all();
        let span = run.run().unwrap();
        // The traced chain: as many messages as delays, each sent by the previous receiver.
        assert_eq!(span.path.len(), 5);
        assert!(span.path.windows(2).all(|w| w[0].to == w[1].from));
        // Node 2 learns the end by Done and node 0 by the core's Report, both at t = 5.
        assert!(matches!(span.path.last().unwrap().kind, "done" | "report"));
        assert!(run.nodes().iter().all(|g| g.is_done()));
        // t = 1: 0 and 1 connect over 0-1 (2's Connect waits at 1); t = 2: the Initiates
        // cross and 1 absorbs 2; the reports reach the core and the end reaches the last
        // node at t = 5. With every link 1 s the chain's delays are the time.
        assert_eq!((span.end_s, span.chain), (5.0, 5), "{span:?}");
        let kinds: Vec<(&str, u64)> = span.by_kind.iter().map(|(&k, &v)| (k, v)).collect();
        assert_eq!(
            kinds,
            [
                ("connect", 3),
                ("done", 1),
                ("initiate", 3),
                ("reject", 1),
                ("report", 3),
                ("test", 1)
            ]
        );
        assert_eq!(span.start_s, 0.0);
        // A second run with nothing given costs nothing.
        let idle = run.run().unwrap();
        assert_eq!((idle.messages(), idle.chain), (0, 0));
        assert_eq!(idle.seconds(), 0.0);
    }

    #[test]
    fn bounds() {
        assert_eq!(ghs_time_bound(1), 0.0);
        assert_eq!(ghs_time_bound(2), 10.0);
        assert_eq!(ghs_message_bound(4, 3), 46.0);
        // A window of 1 is the classic bound; K4 with a window of 2: (12 + 16) * 2 + 24.
        assert_eq!(
            ghs_window_message_bound([3; 4], 6, 1),
            ghs_message_bound(4, 6)
        );
        assert_eq!(ghs_window_message_bound([3; 4], 6, 2), 80.0);
        assert_eq!(ghs_window_message_bound([3; 4], 6, u32::MAX), 96.0);
        assert_eq!(ghs_window_message_bound([0], 0, 8), 0.0);
    }
}
