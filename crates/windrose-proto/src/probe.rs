//! Link probing: round-trip times to a set of peers, measured with ping/pong frames.
//!
//! A [`LinkProber`] sends a [`ProbeMsg::Ping`] with a fresh random nonce to each live peer every
//! [`period`](ProbeConfig::period), [`rounds`](ProbeConfig::rounds) times, and turns each
//! matching [`ProbeMsg::Pong`] into a [`Report::RoundTrip`] (time from the ping's send to the
//! pong's arrival, on this node's clock). It answers every ping it receives with a pong that
//! echoes the ping's fields. It finishes one period after its last round (late pongs are then
//! ignored, as are pongs whose nonce matches no outstanding ping). Each peer's last
//! [`MAX_OUTSTANDING`] pings stay outstanding, so a link whose round trip is longer than the
//! period is measured too (the six sites of seed 004 have round trips up to 1.45 s; with only
//! the latest ping outstanding, a 0.5 s period never measured them); over a FIFO connection a
//! pong also settles every older ping of its peer.
//!
//! Drivers run it beside a collective's machine, routing ping and pong frames to it. Its nonces
//! come from the seeded RNG it is built with (see [`node_rng`](crate::node_rng)), so simulated
//! runs stay reproducible. Timer: [`PROBE_TIMER`].

use crate::frame::Message;
use crate::frame::{Family, FrameError, KindLayout, MessageKind, TransferId};
use crate::node::{
    Command, Input, Output, Outputs, Protocol, ProtocolError, Report, SetupError, Status, TimerId,
};
use crate::time::Time;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::time::Duration;
use windrose_model::NodeId;

/// The body of a ping and of its pong: the pong echoes the ping's fields.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Probe {
    /// Random number chosen by the pinger, to match the pong to its ping.
    pub nonce: u64,
    /// When the ping was sent, on the pinger's clock.
    pub sent_at: Time,
}

/// The prober's messages (frame family 2).
///
/// | kind | message      | fixed body fields                        |
/// |------|--------------|------------------------------------------|
/// | 1    | Ping         | nonce u64, sent_at_ns u64 (16, exact)    |
/// | 2    | Pong         | the ping's fields echoed (16, exact)     |
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ProbeMsg {
    /// A round-trip measurement request.
    Ping(Probe),
    /// The answer to a ping, echoing its fields.
    Pong(Probe),
}

impl ProbeMsg {
    /// The kind of [`ProbeMsg::Ping`].
    pub const PING: MessageKind = MessageKind::of::<ProbeMsg>(1);
    /// The kind of [`ProbeMsg::Pong`].
    pub const PONG: MessageKind = MessageKind::of::<ProbeMsg>(2);
}

impl Family for ProbeMsg {
    const FAMILY: u8 = 2;
    const KINDS: &'static [KindLayout] = &[
        KindLayout {
            kind: 1,
            name: "ping",
            fixed: 16,
            payload: false,
        },
        KindLayout {
            kind: 2,
            name: "pong",
            fixed: 16,
            payload: false,
        },
    ];

    fn kind(&self) -> u8 {
        match self {
            ProbeMsg::Ping(_) => 1,
            ProbeMsg::Pong(_) => 2,
        }
    }

    fn transfer(&self) -> Option<TransferId> {
        None
    }

    fn payload(&self) -> Option<&Bytes> {
        None
    }

    fn put_fixed(&self, dst: &mut BytesMut) {
        let (ProbeMsg::Ping(p) | ProbeMsg::Pong(p)) = self;
        dst.put_u64(p.nonce);
        dst.put_u64(p.sent_at.as_nanos());
    }

    fn parse(kind: u8, mut body: Bytes) -> Result<Self, FrameError> {
        let p = Probe {
            nonce: body.get_u64(),
            sent_at: Time::from_nanos(body.get_u64()),
        };
        match kind {
            1 => Ok(ProbeMsg::Ping(p)),
            2 => Ok(ProbeMsg::Pong(p)),
            kind => Err(FrameError::UnknownKind {
                family: Self::FAMILY,
                kind,
            }),
        }
    }
}

/// The timer of the next probing round.
pub const PROBE_TIMER: TimerId = TimerId(1);

/// How often and how many times to probe.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    /// Time between rounds (positive).
    pub period: Duration,
    /// Rounds of pings (at least 1).
    pub rounds: u32,
}

/// Pings per peer awaiting their pongs: round trips up to this many periods are measured.
pub const MAX_OUTSTANDING: usize = 8;

#[derive(Clone, Debug)]
struct Peer {
    node: NodeId,
    alive: bool,
    /// The pings awaiting their pongs (nonce and our send time), oldest first.
    outstanding: std::collections::VecDeque<Probe>,
}

/// Measures round-trip times to a set of peers. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct LinkProber {
    me: NodeId,
    peers: Vec<Peer>,
    config: ProbeConfig,
    rng: ChaCha8Rng,
    rounds_sent: u32,
    started: bool,
    status: Status,
}

impl LinkProber {
    /// A prober on node `me` for `peers` (duplicates and `me` itself are dropped), drawing
    /// nonces from `rng`.
    pub fn new(
        me: NodeId,
        peers: &[NodeId],
        config: ProbeConfig,
        rng: ChaCha8Rng,
    ) -> Result<LinkProber, SetupError> {
        if config.period.is_zero() {
            return Err(SetupError::Config {
                what: "period",
                requirement: "positive",
                value: "0s".into(),
            });
        }
        if config.rounds == 0 {
            return Err(SetupError::Config {
                what: "rounds",
                requirement: "at least 1",
                value: "0".into(),
            });
        }
        let mut ids: Vec<NodeId> = peers.iter().copied().filter(|&p| p != me).collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(LinkProber {
            me,
            peers: ids
                .into_iter()
                .map(|node| Peer {
                    node,
                    alive: true,
                    outstanding: std::collections::VecDeque::new(),
                })
                .collect(),
            config,
            rng,
            rounds_sent: 0,
            started: false,
            status: Status::Running,
        })
    }

    /// Probes `node` again after it was reported failed (it came back).
    pub fn revive(&mut self, node: NodeId) {
        if let Some(peer) = self.peers.iter_mut().find(|p| p.node == node) {
            peer.alive = true;
            peer.outstanding.clear();
        }
    }

    /// Rounds of pings sent so far.
    pub fn rounds_sent(&self) -> u32 {
        self.rounds_sent
    }

    fn round(&mut self, now: Time, out: &mut Outputs) {
        self.rounds_sent += 1;
        for peer in self.peers.iter_mut().filter(|p| p.alive) {
            let probe = Probe {
                nonce: self.rng.gen(),
                sent_at: now,
            };
            if peer.outstanding.len() == MAX_OUTSTANDING {
                peer.outstanding.pop_front();
            }
            peer.outstanding.push_back(probe);
            out.send(peer.node, Message::Probe(ProbeMsg::Ping(probe)));
        }
        out.push(Output::SetTimer {
            timer: PROBE_TIMER,
            at: now + self.config.period,
        });
    }
}

impl Protocol for LinkProber {
    fn node(&self) -> NodeId {
        self.me
    }

    fn handle(&mut self, now: Time, input: Input, out: &mut Outputs) -> Result<(), ProtocolError> {
        match input {
            Input::Start => {
                if !self.started {
                    self.started = true;
                    self.round(now, out);
                }
            }
            Input::Timer(PROBE_TIMER) => {
                if self.status == Status::Running && self.started {
                    if self.rounds_sent < self.config.rounds {
                        self.round(now, out);
                    } else {
                        self.status = Status::Finished;
                        out.push(Output::Finished);
                    }
                }
            }
            Input::Timer(_) => {}
            Input::Message {
                from,
                message: Message::Probe(ProbeMsg::Ping(probe)),
            } => out.send(from, Message::Probe(ProbeMsg::Pong(probe))),
            Input::Message {
                from,
                message: Message::Probe(ProbeMsg::Pong(probe)),
            } => {
                if self.status != Status::Running {
                    return Ok(());
                }
                if let Some(peer) = self.peers.iter_mut().find(|p| p.node == from) {
                    if let Some(k) = peer.outstanding.iter().position(|o| o.nonce == probe.nonce) {
                        let sent = peer.outstanding[k];
                        peer.outstanding.drain(..=k);
                        out.push(Output::Report(Report::RoundTrip {
                            peer: from,
                            rtt: now - sent.sent_at,
                        }));
                    }
                }
            }
            Input::Message { from, message } => {
                return Err(ProtocolError::UnexpectedMessage {
                    from,
                    kind: message.kind(),
                    why: "a link prober only takes pings and pongs",
                })
            }
            Input::Command(Command::ComputeDone { task }) => {
                return Err(ProtocolError::UnknownTask { task })
            }
            Input::SendComplete { to, id } => return Err(ProtocolError::UnknownSend { to, id }),
            // Requests of the application are the host's business.
            Input::App(_) => {}
            Input::PeerFailed(node) => {
                if let Some(peer) = self.peers.iter_mut().find(|p| p.node == node) {
                    peer.alive = false;
                    peer.outstanding.clear();
                }
            }
        }
        Ok(())
    }

    fn status(&self) -> Status {
        self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::node_rng;

    #[test]
    fn measures_round_trips_between_two_probers() {
        let config = ProbeConfig {
            period: Duration::from_millis(100),
            rounds: 2,
        };
        let (a, b) = (NodeId(0), NodeId(1));
        let mut pa = LinkProber::new(a, &[a, b, b], config, node_rng(1, a)).unwrap();
        let mut pb = LinkProber::new(b, &[a], config, node_rng(1, b)).unwrap();
        let mut out = Outputs::new();
        pa.handle(Time::ZERO, Input::Start, &mut out).unwrap();
        let Some(Output::Send(ping)) = out.as_slice().first().cloned() else {
            panic!("expected a ping first");
        };
        assert_eq!(ping.to, b);
        out.clear();
        // b answers at 3 ms, the pong arrives at a at 7 ms.
        pb.handle(
            Time::from_millis(3),
            Input::Message {
                from: a,
                message: ping.message,
            },
            &mut out,
        )
        .unwrap();
        let Some(Output::Send(pong)) = out.drain().next() else {
            panic!("expected a pong");
        };
        let pong_input = Input::Message {
            from: b,
            message: pong.message,
        };
        pa.handle(Time::from_millis(7), pong_input.clone(), &mut out)
            .unwrap();
        assert_eq!(
            out.as_slice(),
            &[Output::Report(Report::RoundTrip {
                peer: b,
                rtt: Duration::from_millis(7)
            })]
        );
        out.clear();
        // A duplicate pong is ignored.
        pa.handle(Time::from_millis(8), pong_input, &mut out)
            .unwrap();
        assert!(out.is_empty());
        // Second round, then finished one period later.
        pa.handle(Time::from_millis(100), Input::Timer(PROBE_TIMER), &mut out)
            .unwrap();
        assert_eq!(pa.rounds_sent(), 2);
        out.clear();
        pa.handle(Time::from_millis(200), Input::Timer(PROBE_TIMER), &mut out)
            .unwrap();
        assert_eq!(out.as_slice(), &[Output::Finished]);
        assert!(pa.is_finished());
    }

    #[test]
    fn round_trips_longer_than_the_period_are_measured() {
        // Pongs come back 250 ms after their pings, the period is 100 ms: each pong still
        // matches its own ping (the prober keeps the last pings outstanding, not only the
        // latest), in order.
        let config = ProbeConfig {
            period: Duration::from_millis(100),
            rounds: 40,
        };
        let (a, b) = (NodeId(0), NodeId(1));
        let mut pa = LinkProber::new(a, &[b], config, node_rng(1, a)).unwrap();
        let mut out = Outputs::new();
        let mut pings = Vec::new();
        let mut rtts = Vec::new();
        for k in 0..30u64 {
            let now = Time::from_millis(100 * k);
            let input = if k == 0 {
                Input::Start
            } else {
                Input::Timer(PROBE_TIMER)
            };
            pa.handle(now, input, &mut out).unwrap();
            // The pong of the ping sent at (k - 2.5) periods arrives now + 50 ms.
            for o in out.drain() {
                if let Output::Send(t) = o {
                    if let Message::Probe(ProbeMsg::Ping(p)) = t.message {
                        pings.push(p);
                    }
                }
            }
            if k >= 3 {
                let p = pings[(k - 3) as usize];
                pa.handle(
                    Time::from_millis(100 * (k - 3) + 250),
                    Input::Message {
                        from: b,
                        message: Message::Probe(ProbeMsg::Pong(p)),
                    },
                    &mut out,
                )
                .unwrap();
                for o in out.drain() {
                    if let Output::Report(Report::RoundTrip { rtt, .. }) = o {
                        rtts.push(rtt);
                    }
                }
            }
        }
        assert_eq!(rtts.len(), 27);
        assert!(rtts.iter().all(|&r| r == Duration::from_millis(250)));
        // A pong already taken (the first ping's, again) reports nothing.
        pa.handle(
            Time::from_millis(3000),
            Input::Message {
                from: b,
                message: Message::Probe(ProbeMsg::Pong(pings[0])),
            },
            &mut out,
        )
        .unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn same_seed_same_nonces() {
        let config = ProbeConfig {
            period: Duration::from_secs(1),
            rounds: 1,
        };
        let run = |seed| {
            let mut p = LinkProber::new(NodeId(0), &[NodeId(1)], config, node_rng(seed, NodeId(0)))
                .unwrap();
            let mut out = Outputs::new();
            p.handle(Time::ZERO, Input::Start, &mut out).unwrap();
            out.as_slice().to_vec()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
        assert!(LinkProber::new(
            NodeId(0),
            &[],
            ProbeConfig {
                period: Duration::ZERO,
                rounds: 1
            },
            node_rng(0, NodeId(0))
        )
        .is_err());
    }
}
