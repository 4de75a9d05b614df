//! [`MstFrame`]: a maintained MST's messages on the wire, frame family 9.
//!
//! Every kind is a payload-less fixed layout (like GHS's family 6), so the frame header alone
//! settles the length and a peer cannot make a receiver wait for, or buffer, more than the
//! kind's bytes. All integers big-endian; `gen` is the [`MaintainedMst`](super::MaintainedMst)
//! generation (u32), `epoch` the repair epoch (u32). An optional key is a tag byte (0 none,
//! 1 some) and 16 key bytes ([`EdgeKey`]'s layout; all zero for none), so the encoding is
//! canonical: [`MstFrame::parse`] accepts exactly what [`MstFrame::put_body`] writes.
//!
//! | kind | name          | fixed body |
//! |------|---------------|------------|
//! | 1    | `mst_hello`   | gen, weight f64 (12) |
//! | 2    | `mst_ghs`     | gen, GHS kind u8, GHS body zero-padded to 29 bytes (34) |
//! | 3    | `mst_request` | gen, change: from u32, to u32, weight f64, behind u32, waited u8 (0 or 1) (25) |
//! | 4    | `mst_begin`   | gen, epoch, change (16), has-fragment u8, old key, new key (zero if none) (57) |
//! | 5    | `mst_test`    | gen, epoch, fragment key (24) |
//! | 6    | `mst_accept`  | gen, epoch (8) |
//! | 7    | `mst_reject`  | gen, epoch (8) |
//! | 8    | `mst_echo`    | gen, epoch, best opt-key (17), change (tag 0 none, 1 non-tree, 2 tree edge; old key, new key) (33), from-path and to-path (tag 0 none, 1 no edge yet, 2 key; 16 key bytes) (17 each), path-max opt-key (17) (109) |
//! | 9    | `mst_stable`  | gen, epoch, remove opt-key, add opt-key, nodes u32 (>= 1), total weight f64 (54) |
//! | 10   | `mst_parent`  | gen, has-parent u8, parent u32 (0 if none) (9): the live service's tree announcement ([`crate::mst_service`]) |
//! | 11   | `mst_row`     | gen (4), then a payload: the sender's row, one entry per member it holds alive, ids strictly increasing, none its own: id u32, weight f64 (12 each) |
//! | 12   | `mst_join`    | gen, epoch (8): the local recovery's `Join` |
//! | 13   | `mst_count`   | gen, nodes u32 (>= 1), weight f64, gone u32 (20) |
//! | 14   | `mst_core`    | gen, level u8 (1..=32) (5) |
//! | 15   | `mst_settled` | gen, nodes u32 (>= 1), total weight f64 (16) |
//! | 16   | `mst_rghs`    | gen, GHS kind u8, GHS body zero-padded to 29 bytes (34): a GHS message of the recovery's merges |
//!
//! `mst_row` is the one kind with a payload (the [rows build](super::BuildAlgorithm::Rows)'s
//! Hello): its length is 12 bytes per entry, so a receiver buffers at most what the frame
//! body limit allows, and the payload is checked whole (multiple of 12, ids increasing,
//! weights finite and non-negative with the sign bit clear) before the frame is taken.
//!
//! The echo's 109 bytes are the largest fixed body of any family
//! ([`MAX_FIXED_BODY_LEN`](crate::frame::MAX_FIXED_BODY_LEN)): a receiver with the default
//! 16 MiB body limit takes data and piece payloads of up to 16 MiB - 109 bytes.

use super::{Change, ChangeSeen, EchoInfo, MstNodeMsg, RecoverMsg, RepairMsg};
use crate::frame::{Family, FrameError, KindLayout, MessageKind, TransferId};
use crate::ghs::{be_u32, be_u64, EdgeKey, GhsMsg, KEY_LEN, MAX_BODY_LEN};
use bytes::{BufMut, Bytes, BytesMut};
use windrose_model::NodeId;

const K_HELLO: u8 = 1;
const K_GHS: u8 = 2;
const K_REQUEST: u8 = 3;
const K_BEGIN: u8 = 4;
const K_TEST: u8 = 5;
const K_ACCEPT: u8 = 6;
const K_REJECT: u8 = 7;
const K_ECHO: u8 = 8;
const K_STABLE: u8 = 9;
const K_PARENT: u8 = 10;
const K_ROW: u8 = 11;
const K_JOIN: u8 = 12;
const K_COUNT: u8 = 13;
const K_CORE: u8 = 14;
const K_SETTLED: u8 = 15;
const K_RGHS: u8 = 16;

/// Fixed body bytes per kind (index `kind - 1`); `mst_row`'s payload follows its 4.
const LENS: [usize; 16] = [
    12,
    5 + MAX_BODY_LEN,
    25,
    57,
    24,
    8,
    8,
    109,
    54,
    9,
    4,
    8,
    20,
    5,
    16,
    5 + MAX_BODY_LEN,
];

/// Bytes of one row entry on the wire.
pub const ROW_ENTRY_LEN: usize = 12;

/// A row (`(member, weight)`, ids strictly increasing) as `mst_row`'s payload.
pub fn encode_row(entries: &[(NodeId, f64)]) -> Bytes {
    let mut b = BytesMut::with_capacity(entries.len() * ROW_ENTRY_LEN);
    for &(n, w) in entries {
        b.put_u32(n.0);
        // `-0.0` goes as `+0.0` (the parser refuses the sign bit).
        b.put_u64(if w == 0.0 { 0.0f64 } else { w }.to_bits());
    }
    b.freeze()
}

/// The entries of a row payload that [`MstFrame::parse`] accepted.
pub fn row_entries(row: &Bytes) -> impl Iterator<Item = (NodeId, f64)> + '_ {
    row.chunks_exact(ROW_ENTRY_LEN)
        .map(|c| (NodeId(be_u32(&c[0..4])), f64::from_bits(be_u64(&c[4..12]))))
}

/// The largest fixed body of the family (the echo's).
pub const MAX_MST_BODY_LEN: usize = 109;

/// A message of a node's maintained MST, as it travels between Hosts (see the
/// [module docs](crate::ghs_repair)).
#[derive(Clone, Debug)]
pub enum MstFrame {
    /// A [`MaintainedMst`](super::MaintainedMst) message.
    Node(MstNodeMsg),
    /// The live service's announcement of the sender's parent in generation `generation`'s
    /// freshly built tree (None: the sender is the root).
    Parent {
        /// The generation.
        generation: u32,
        /// The sender's parent.
        parent: Option<NodeId>,
    },
}

impl MstFrame {
    /// The frame kind of kind byte `kind` (1..=16).
    pub const fn kind_of(kind: u8) -> MessageKind {
        MessageKind::of::<MstFrame>(kind)
    }

    fn kind_byte(&self) -> u8 {
        match self {
            MstFrame::Parent { .. } => K_PARENT,
            MstFrame::Node(MstNodeMsg::Hello { .. }) => K_HELLO,
            MstFrame::Node(MstNodeMsg::Row { .. }) => K_ROW,
            MstFrame::Node(MstNodeMsg::Ghs { .. }) => K_GHS,
            MstFrame::Node(MstNodeMsg::Repair { msg, .. }) => K_REQUEST + msg.kind_index() as u8,
            MstFrame::Node(MstNodeMsg::Recover { msg, .. }) => match msg {
                RecoverMsg::Join { .. } => K_JOIN,
                RecoverMsg::Count { .. } => K_COUNT,
                RecoverMsg::Core { .. } => K_CORE,
                RecoverMsg::Settled { .. } => K_SETTLED,
                RecoverMsg::Ghs(_) => K_RGHS,
            },
        }
    }

    /// Writes the fixed body (exactly the kind's length).
    pub fn put_body(&self, dst: &mut BytesMut) {
        let opt_key = |dst: &mut BytesMut, k: Option<EdgeKey>| match k {
            Some(k) => {
                dst.put_u8(1);
                k.encode(dst);
            }
            None => {
                dst.put_u8(0);
                dst.put_bytes(0, KEY_LEN);
            }
        };
        let path = |dst: &mut BytesMut, p: Option<Option<EdgeKey>>| match p {
            None => {
                dst.put_u8(0);
                dst.put_bytes(0, KEY_LEN);
            }
            Some(None) => {
                dst.put_u8(1);
                dst.put_bytes(0, KEY_LEN);
            }
            Some(Some(k)) => {
                dst.put_u8(2);
                k.encode(dst);
            }
        };
        let change = |dst: &mut BytesMut, c: Change| {
            dst.put_u32(c.from.0);
            dst.put_u32(c.to.0);
            dst.put_u64(c.weight.to_bits());
        };
        match *self {
            MstFrame::Node(MstNodeMsg::Row { generation, .. }) => dst.put_u32(generation),
            MstFrame::Parent { generation, parent } => {
                dst.put_u32(generation);
                dst.put_u8(u8::from(parent.is_some()));
                dst.put_u32(parent.map_or(0, |p| p.0));
            }
            MstFrame::Node(MstNodeMsg::Hello { generation, weight }) => {
                dst.put_u32(generation);
                dst.put_u64(weight.to_bits());
            }
            MstFrame::Node(MstNodeMsg::Ghs { generation, msg })
            | MstFrame::Node(MstNodeMsg::Recover {
                generation,
                msg: RecoverMsg::Ghs(msg),
            }) => {
                dst.put_u32(generation);
                dst.put_u8(msg.kind());
                msg.encode_body(dst);
                dst.put_bytes(0, MAX_BODY_LEN - msg.body_len());
            }
            MstFrame::Node(MstNodeMsg::Recover { generation, msg }) => {
                dst.put_u32(generation);
                match msg {
                    RecoverMsg::Join { epoch } => dst.put_u32(epoch),
                    RecoverMsg::Count {
                        nodes,
                        weight,
                        gone,
                    } => {
                        dst.put_u32(nodes);
                        dst.put_u64(weight.to_bits());
                        dst.put_u32(gone);
                    }
                    RecoverMsg::Core { level } => dst.put_u8(level),
                    RecoverMsg::Settled {
                        nodes,
                        total_weight,
                    } => {
                        dst.put_u32(nodes);
                        dst.put_u64(total_weight.to_bits());
                    }
                    RecoverMsg::Ghs(_) => unreachable!("written above"),
                }
            }
            MstFrame::Node(MstNodeMsg::Repair { generation, msg }) => {
                dst.put_u32(generation);
                match msg {
                    RepairMsg::Request {
                        change: c,
                        behind,
                        waited,
                    } => {
                        change(dst, c);
                        dst.put_u32(behind);
                        dst.put_u8(u8::from(waited));
                    }
                    RepairMsg::Begin {
                        epoch,
                        change: c,
                        fragment,
                    } => {
                        dst.put_u32(epoch);
                        change(dst, c);
                        match fragment {
                            Some((old, new)) => {
                                dst.put_u8(1);
                                old.encode(dst);
                                new.encode(dst);
                            }
                            None => {
                                dst.put_u8(0);
                                dst.put_bytes(0, 2 * KEY_LEN);
                            }
                        }
                    }
                    RepairMsg::Test { epoch, fragment } => {
                        dst.put_u32(epoch);
                        fragment.encode(dst);
                    }
                    RepairMsg::Accept { epoch } | RepairMsg::Reject { epoch } => dst.put_u32(epoch),
                    RepairMsg::Echo { epoch, info } => {
                        dst.put_u32(epoch);
                        opt_key(dst, info.best);
                        match info.change {
                            Some(s) => {
                                dst.put_u8(if s.was_branch { 2 } else { 1 });
                                s.old.encode(dst);
                                s.new.encode(dst);
                            }
                            None => {
                                dst.put_u8(0);
                                dst.put_bytes(0, 2 * KEY_LEN);
                            }
                        }
                        path(dst, info.from_path);
                        path(dst, info.to_path);
                        opt_key(dst, info.path_max);
                    }
                    RepairMsg::Stable {
                        epoch,
                        remove,
                        add,
                        nodes,
                        total_weight,
                    } => {
                        dst.put_u32(epoch);
                        opt_key(dst, remove);
                        opt_key(dst, add);
                        dst.put_u32(nodes);
                        dst.put_u64(total_weight.to_bits());
                    }
                }
            }
        }
    }

    /// Parses a fixed body of kind `kind` (its length checked or not: a wrong one is an
    /// error). Never panics; a field out of range is an error naming the kind and the value.
    pub fn parse(kind: u8, b: &[u8]) -> Result<MstFrame, FrameError> {
        let Some(&len) = LENS.get(usize::from(kind).wrapping_sub(1)) else {
            return Err(FrameError::UnknownKind {
                family: Self::FAMILY,
                kind,
            });
        };
        let mk = Self::kind_of(kind);
        let at_least = kind == K_ROW;
        if b.len() != len && !(at_least && b.len() > len) {
            return Err(FrameError::BodyLength {
                kind: mk,
                found: b.len() as u32,
                expected: len,
                at_least,
            });
        }
        let bad = |what: String| FrameError::Invalid { kind: mk, what };
        let amount = |x: &[u8], what: &str| {
            let bits = be_u64(x);
            let v = f64::from_bits(bits);
            if v.is_finite() && bits >> 63 == 0 {
                Ok(v)
            } else {
                Err(bad(format!(
                    "{what} bits {bits:#018x} are not a finite, non-negative f64 with the sign bit clear"
                )))
            }
        };
        let key = |x: &[u8]| {
            EdgeKey::parse(0, x).map_err(|e| match e {
                crate::ghs::GhsWireError::Invalid { what, .. } => bad(what),
                other => bad(other.to_string()),
            })
        };
        let zeros = |x: &[u8], what: &str| {
            if x.iter().all(|&z| z == 0) {
                Ok(())
            } else {
                Err(bad(format!("{what}: absent, with non-zero bytes")))
            }
        };
        let opt_key = |x: &[u8], what: &str| match x[0] {
            0 => zeros(&x[1..17], what).map(|()| None),
            1 => key(&x[1..17]).map(Some),
            t => Err(bad(format!("{what}: tag {t} is neither 0 nor 1"))),
        };
        let path = |x: &[u8], what: &str| match x[0] {
            0 => zeros(&x[1..17], what).map(|()| None),
            1 => zeros(&x[1..17], what).map(|()| Some(None)),
            2 => key(&x[1..17]).map(|k| Some(Some(k))),
            t => Err(bad(format!("{what}: tag {t} is not 0, 1 or 2"))),
        };
        let change = |x: &[u8]| {
            let (from, to) = (NodeId(be_u32(&x[0..4])), NodeId(be_u32(&x[4..8])));
            let weight = amount(&x[8..16], "change weight")?;
            if from == to {
                return Err(bad(format!("a change of the edge from {from} to itself")));
            }
            Ok(Change { from, to, weight })
        };
        let generation = be_u32(&b[0..4]);
        let repair = |msg: RepairMsg| Ok(MstFrame::Node(MstNodeMsg::Repair { generation, msg }));
        let recover = |msg: RecoverMsg| Ok(MstFrame::Node(MstNodeMsg::Recover { generation, msg }));
        let epoch = || be_u32(&b[4..8]);
        match kind {
            K_ROW => {
                let row = &b[4..];
                if !row.len().is_multiple_of(ROW_ENTRY_LEN) {
                    return Err(bad(format!(
                        "a row of {} bytes, not a multiple of {ROW_ENTRY_LEN}",
                        row.len()
                    )));
                }
                let mut last: Option<u32> = None;
                for c in row.chunks_exact(ROW_ENTRY_LEN) {
                    let id = be_u32(&c[0..4]);
                    if last.is_some_and(|l| l >= id) {
                        return Err(bad(format!("row ids not increasing at {id}")));
                    }
                    last = Some(id);
                    amount(&c[4..12], "row weight")?;
                }
                Ok(MstFrame::Node(MstNodeMsg::Row {
                    generation,
                    row: Bytes::copy_from_slice(row),
                }))
            }
            K_HELLO => Ok(MstFrame::Node(MstNodeMsg::Hello {
                generation,
                weight: amount(&b[4..12], "hello weight")?,
            })),
            K_GHS | K_RGHS => {
                let gk = b[4];
                let Some(gl) = GhsMsg::kind_name(gk).map(|_| ghs_len(gk)) else {
                    return Err(bad(format!("GHS kind byte {gk} is not 1..=8")));
                };
                zeros(&b[5 + gl..], "GHS body padding")?;
                let msg = GhsMsg::parse(gk, &b[5..5 + gl]).map_err(|e| bad(e.to_string()))?;
                Ok(MstFrame::Node(if kind == K_GHS {
                    MstNodeMsg::Ghs { generation, msg }
                } else {
                    MstNodeMsg::Recover {
                        generation,
                        msg: RecoverMsg::Ghs(msg),
                    }
                }))
            }
            K_JOIN => recover(RecoverMsg::Join { epoch: epoch() }),
            K_COUNT => {
                let nodes = be_u32(&b[4..8]);
                if nodes == 0 {
                    return Err(bad("a count of 0 nodes".to_string()));
                }
                recover(RecoverMsg::Count {
                    nodes,
                    weight: amount(&b[8..16], "count weight")?,
                    gone: be_u32(&b[16..20]),
                })
            }
            K_CORE => {
                let level = b[4];
                if level == 0 || level > crate::ghs::MAX_LEVEL {
                    return Err(bad(format!("core level {level} is not 1..=32")));
                }
                recover(RecoverMsg::Core { level })
            }
            K_SETTLED => {
                let nodes = be_u32(&b[4..8]);
                if nodes == 0 {
                    return Err(bad("settled with 0 nodes".to_string()));
                }
                recover(RecoverMsg::Settled {
                    nodes,
                    total_weight: amount(&b[8..16], "settled total weight")?,
                })
            }
            K_REQUEST => repair(RepairMsg::Request {
                change: change(&b[4..20])?,
                behind: be_u32(&b[20..24]),
                waited: match b[24] {
                    0 => false,
                    1 => true,
                    t => return Err(bad(format!("waited tag {t} is neither 0 nor 1"))),
                },
            }),
            K_BEGIN => repair(RepairMsg::Begin {
                epoch: epoch(),
                change: change(&b[8..24])?,
                fragment: match b[24] {
                    0 => zeros(&b[25..57], "fragment").map(|()| None)?,
                    1 => Some((key(&b[25..41])?, key(&b[41..57])?)),
                    t => return Err(bad(format!("fragment tag {t} is neither 0 nor 1"))),
                },
            }),
            K_TEST => repair(RepairMsg::Test {
                epoch: epoch(),
                fragment: key(&b[8..24])?,
            }),
            K_ACCEPT => repair(RepairMsg::Accept { epoch: epoch() }),
            K_REJECT => repair(RepairMsg::Reject { epoch: epoch() }),
            K_ECHO => repair(RepairMsg::Echo {
                epoch: epoch(),
                info: EchoInfo {
                    best: opt_key(&b[8..25], "best")?,
                    change: match b[25] {
                        0 => zeros(&b[26..58], "change").map(|()| None)?,
                        t @ (1 | 2) => Some(ChangeSeen {
                            was_branch: t == 2,
                            old: key(&b[26..42])?,
                            new: key(&b[42..58])?,
                        }),
                        t => return Err(bad(format!("change tag {t} is not 0, 1 or 2"))),
                    },
                    from_path: path(&b[58..75], "from-path")?,
                    to_path: path(&b[75..92], "to-path")?,
                    path_max: opt_key(&b[92..109], "path-max")?,
                },
            }),
            K_STABLE => {
                let nodes = be_u32(&b[42..46]);
                if nodes == 0 {
                    return Err(bad("a stable tree of 0 nodes".to_string()));
                }
                repair(RepairMsg::Stable {
                    epoch: epoch(),
                    remove: opt_key(&b[8..25], "remove")?,
                    add: opt_key(&b[25..42], "add")?,
                    nodes,
                    total_weight: amount(&b[46..54], "total weight")?,
                })
            }
            _ => Ok(MstFrame::Parent {
                generation,
                parent: match b[4] {
                    0 => zeros(&b[5..9], "parent").map(|()| None)?,
                    1 => Some(NodeId(be_u32(&b[5..9]))),
                    t => return Err(bad(format!("parent tag {t} is neither 0 nor 1"))),
                },
            }),
        }
    }

    /// The whole body: the fixed fields, then a row's payload.
    fn body(&self) -> BytesMut {
        let mut b = BytesMut::with_capacity(MAX_MST_BODY_LEN);
        self.put_body(&mut b);
        if let MstFrame::Node(MstNodeMsg::Row { row, .. }) = self {
            b.extend_from_slice(row);
        }
        b
    }
}

/// The body length of GHS kind `kind` (1..=8).
fn ghs_len(kind: u8) -> usize {
    crate::ghs::LENS[usize::from(kind - 1)]
}

impl PartialEq for MstFrame {
    /// By bytes, so equality is an equivalence although the messages carry `f64`s.
    fn eq(&self, other: &MstFrame) -> bool {
        self.kind_byte() == other.kind_byte() && self.body() == other.body()
    }
}

impl Eq for MstFrame {}

const fn layout(kind: u8, name: &'static str) -> KindLayout {
    KindLayout {
        kind,
        name,
        fixed: LENS[kind as usize - 1],
        payload: kind == K_ROW,
    }
}

impl Family for MstFrame {
    const FAMILY: u8 = 9;
    const KINDS: &'static [KindLayout] = &[
        layout(K_HELLO, "mst_hello"),
        layout(K_GHS, "mst_ghs"),
        layout(K_REQUEST, "mst_request"),
        layout(K_BEGIN, "mst_begin"),
        layout(K_TEST, "mst_test"),
        layout(K_ACCEPT, "mst_accept"),
        layout(K_REJECT, "mst_reject"),
        layout(K_ECHO, "mst_echo"),
        layout(K_STABLE, "mst_stable"),
        layout(K_PARENT, "mst_parent"),
        layout(K_ROW, "mst_row"),
        layout(K_JOIN, "mst_join"),
        layout(K_COUNT, "mst_count"),
        layout(K_CORE, "mst_core"),
        layout(K_SETTLED, "mst_settled"),
        layout(K_RGHS, "mst_rghs"),
    ];

    fn kind(&self) -> u8 {
        self.kind_byte()
    }

    /// None: a node's maintained MST lives as long as the group, outside any collective.
    fn transfer(&self) -> Option<TransferId> {
        None
    }

    fn payload(&self) -> Option<&Bytes> {
        match self {
            MstFrame::Node(MstNodeMsg::Row { row, .. }) => Some(row),
            _ => None,
        }
    }

    fn put_fixed(&self, dst: &mut BytesMut) {
        self.put_body(dst);
    }

    fn parse(kind: u8, body: Bytes) -> Result<Self, FrameError> {
        MstFrame::parse(kind, &body)
    }

    fn validate(&self) -> Result<(), FrameError> {
        MstFrame::parse(self.kind_byte(), &self.body()).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(f: MstFrame) -> Vec<u8> {
        f.body().to_vec()
    }

    #[test]
    fn non_canonical_bodies_are_refused_naming_the_kind() {
        let stable = MstFrame::Node(MstNodeMsg::Repair {
            generation: 2,
            msg: RepairMsg::Stable {
                epoch: 3,
                remove: None,
                add: EdgeKey::new(NodeId(1), NodeId(4), 13.5),
                nodes: 6,
                total_weight: 758.6,
            },
        });
        let good = body(stable.clone());
        assert_eq!(good.len(), LENS[usize::from(K_STABLE) - 1]);
        assert_eq!(MstFrame::parse(K_STABLE, &good).unwrap(), stable);
        let refuse = |kind: u8, b: &[u8], needle: &str| {
            let e = MstFrame::parse(kind, b).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
            assert!(e.contains(MstFrame::kind_of(kind).name()), "{e}");
        };
        let mut b = good.clone();
        b[8 + 3] = 1; // a byte of the absent `remove` key
        refuse(K_STABLE, &b, "remove: absent, with non-zero bytes");
        let mut b = good.clone();
        b[25] = 7;
        refuse(K_STABLE, &b, "add: tag 7");
        let mut b = good.clone();
        b[42..46].copy_from_slice(&0u32.to_be_bytes());
        refuse(K_STABLE, &b, "0 nodes");
        let mut b = good.clone();
        b[46..54].copy_from_slice(&f64::NAN.to_bits().to_be_bytes());
        refuse(K_STABLE, &b, "total weight bits");
        refuse(K_STABLE, &good[..50], "body");

        let ghs = MstFrame::Node(MstNodeMsg::Ghs {
            generation: 0,
            msg: GhsMsg::Connect { level: 1 },
        });
        let mut b = body(ghs.clone());
        assert_eq!(MstFrame::parse(K_GHS, &b).unwrap(), ghs);
        b[20] = 1;
        refuse(K_GHS, &b, "GHS body padding");
        b[20] = 0;
        b[4] = 9;
        refuse(K_GHS, &b, "GHS kind byte 9");
        let request = MstFrame::Node(MstNodeMsg::Repair {
            generation: 0,
            msg: RepairMsg::Request {
                change: Change {
                    from: NodeId(3),
                    to: NodeId(4),
                    weight: 1.0,
                },
                behind: 2,
                waited: true,
            },
        });
        let mut b = body(request.clone());
        assert_eq!(MstFrame::parse(K_REQUEST, &b).unwrap(), request);
        b[24] = 2;
        refuse(K_REQUEST, &b, "waited tag 2");
        b[24] = 1;
        b[8..12].copy_from_slice(&3u32.to_be_bytes());
        refuse(K_REQUEST, &b, "to itself");
        assert!(matches!(
            MstFrame::parse(17, &[]),
            Err(FrameError::UnknownKind {
                family: 9,
                kind: 17
            })
        ));
    }

    #[test]
    fn recovery_kinds_round_trip_and_bad_fields_are_refused() {
        let recover = |msg| MstFrame::Node(MstNodeMsg::Recover { generation: 7, msg });
        let core = EdgeKey::new(NodeId(2), NodeId(5), 0.5).unwrap();
        for (kind, f) in [
            (K_JOIN, recover(RecoverMsg::Join { epoch: 3 })),
            (
                K_COUNT,
                recover(RecoverMsg::Count {
                    nodes: 4,
                    weight: 1.25,
                    gone: 2,
                }),
            ),
            (K_CORE, recover(RecoverMsg::Core { level: 3 })),
            (
                K_SETTLED,
                recover(RecoverMsg::Settled {
                    nodes: 23,
                    total_weight: 758.6,
                }),
            ),
            (
                K_RGHS,
                recover(RecoverMsg::Ghs(GhsMsg::Test {
                    level: 2,
                    fragment: core,
                })),
            ),
        ] {
            let b = body(f.clone());
            assert_eq!(f.kind_byte(), kind);
            assert_eq!(b.len(), LENS[usize::from(kind) - 1]);
            assert_eq!(MstFrame::parse(kind, &b).unwrap(), f);
        }
        // The recovery's GHS kind is not the build's: the receiver tells them apart.
        let rghs = body(recover(RecoverMsg::Ghs(GhsMsg::Connect { level: 1 })));
        assert!(matches!(
            MstFrame::parse(K_GHS, &rghs).unwrap(),
            MstFrame::Node(MstNodeMsg::Ghs { .. })
        ));
        let refuse = |kind: u8, b: &[u8], needle: &str| {
            let e = MstFrame::parse(kind, b).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
            assert!(e.contains(MstFrame::kind_of(kind).name()), "{e}");
        };
        let mut b = body(recover(RecoverMsg::Core { level: 1 }));
        b[4] = 0;
        refuse(K_CORE, &b, "core level 0");
        b[4] = 33;
        refuse(K_CORE, &b, "core level 33");
        let mut b = body(recover(RecoverMsg::Count {
            nodes: 1,
            weight: 0.0,
            gone: 0,
        }));
        b[8..16].copy_from_slice(&f64::NAN.to_bits().to_be_bytes());
        refuse(K_COUNT, &b, "count weight bits");
        b[4..8].copy_from_slice(&0u32.to_be_bytes());
        refuse(K_COUNT, &b, "0 nodes");
        let b = body(recover(RecoverMsg::Settled {
            nodes: 1,
            total_weight: 0.0,
        }));
        refuse(K_SETTLED, &b[..15], "body");
    }

    #[test]
    fn rows_round_trip_and_bad_rows_are_refused() {
        let row = MstFrame::Node(MstNodeMsg::Row {
            generation: 3,
            row: encode_row(&[(NodeId(1), 0.0), (NodeId(4), 14.9), (NodeId(9), 722.9)]),
        });
        let good = body(row.clone());
        assert_eq!(good.len(), 4 + 3 * ROW_ENTRY_LEN);
        assert_eq!(MstFrame::parse(K_ROW, &good).unwrap(), row);
        assert_eq!(row.payload().map(|p| p.len()), Some(3 * ROW_ENTRY_LEN));
        let entries: Vec<(NodeId, f64)> = match MstFrame::parse(K_ROW, &good).unwrap() {
            MstFrame::Node(MstNodeMsg::Row { row, .. }) => row_entries(&row).collect(),
            _ => unreachable!(),
        };
        assert_eq!(entries[2], (NodeId(9), 722.9));
        // An empty row (the only member left) is a row.
        assert!(MstFrame::parse(K_ROW, &good[..4]).is_ok());
        let refuse = |b: &[u8], needle: &str| {
            let e = MstFrame::parse(K_ROW, b).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
            assert!(e.contains("mst_row"), "{e}");
        };
        refuse(&good[..good.len() - 1], "not a multiple of 12");
        refuse(&good[..3], "body of 3 bytes");
        let mut b = good.clone();
        b[4 + 12..4 + 16].copy_from_slice(&1u32.to_be_bytes());
        refuse(&b, "not increasing at 1");
        let mut b = good.clone();
        b[8..16].copy_from_slice(&(-0.0f64).to_bits().to_be_bytes());
        refuse(&b, "row weight bits");
        let mut b = good;
        b[20..28].copy_from_slice(&f64::INFINITY.to_bits().to_be_bytes());
        refuse(&b, "row weight bits");
    }
}
