//! How a node learns who it is and who its peers are ([`Bootstrap`]), and how two nodes make
//! sure they belong to the same run when they connect ([`Handshake`]).
//!
//! Both are traits so later work can swap them without touching the driver: a bootstrap that
//! reads the rank and peer addresses from mpirun/srun, a handshake that proves knowledge of a
//! group key (and encrypts the stream). The implementations are [`GroupFile`] /
//! [`StaticMembership`], [`PlainHandshake`], which checks group name, node ids, versions
//! and the digest of the group description ([`Group::digest`]) in the clear (see [`crate::wire`] for the frames), and [`crate::auth::NoiseHandshake`],
//! which makes the same checks inside a Noise handshake keyed with the group key.

use crate::error::NetError;
use crate::group::{load_group, Group};
use crate::wire::{Control, FrameReader, Hello, Role, Welcome, WireFrame};
use crate::PROTOCOL_VERSION;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use windrose_model::NodeId;
use windrose_proto::frame::VERSION as WIRE_VERSION;

/// A boxed future, for the object-safe [`Handshake`] trait.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Who this node is: its group and its own id.
#[derive(Clone, Debug)]
pub struct Membership {
    /// The group.
    pub group: Arc<Group>,
    /// This node.
    pub me: NodeId,
}

/// A source of [`Membership`]: a group file today; a launcher's environment (mpirun, srun)
/// later.
pub trait Bootstrap {
    /// This node's membership, or why it cannot be had (a bad file, an id not in the group).
    fn membership(&self) -> Result<Membership, NetError>;
}

/// Membership from a group file and a node id given by the user.
#[derive(Clone, Debug)]
pub struct GroupFile {
    /// The group file.
    pub path: PathBuf,
    /// This node's id.
    pub id: u32,
}

impl Bootstrap for GroupFile {
    fn membership(&self) -> Result<Membership, NetError> {
        let group = load_group(&self.path)?;
        let me = NodeId(self.id);
        if !group.contains(me) {
            return Err(NetError::Group(format!(
                "--id {}: {} has {}",
                self.id,
                self.path.display(),
                windrose_model::error::ids_in_words(group.len())
            )));
        }
        Ok(Membership {
            group: Arc::new(group),
            me,
        })
    }
}

/// Membership given directly (tests, in-process groups).
#[derive(Clone, Debug)]
pub struct StaticMembership(pub Membership);

impl Bootstrap for StaticMembership {
    fn membership(&self) -> Result<Membership, NetError> {
        Ok(self.0.clone())
    }
}

/// A TCP connection during its handshake: the stream and the frame reader holding whatever
/// was received beyond the handshake frames (handed on to the connection's reader).
pub struct Transport {
    /// The stream.
    pub stream: TcpStream,
    /// Its reader.
    pub reader: FrameReader,
}

/// What a successful handshake established.
#[derive(Clone, Debug)]
pub struct Established {
    /// The peer's node id (verified).
    pub peer: NodeId,
    /// Why the dialer dialed.
    pub role: Role,
    /// The handshake's round-trip time (dialer side only).
    pub rtt: Option<Duration>,
    /// The session's keys when the data path is encrypted ([`crate::secure`]).
    pub cipher: Option<std::sync::Arc<crate::secure::Cipher>>,
}

/// Mutual verification of a new connection. Both methods must check everything they receive
/// and, on a mismatch, tell the other side why before failing, so both report the reason.
pub trait Handshake: Send + Sync + 'static {
    /// The dialer's side: `me` reaches `peer` (who should be at `addr`) for `role`.
    fn dial<'a>(
        &'a self,
        io: &'a mut Transport,
        group: &'a Group,
        me: NodeId,
        peer: NodeId,
        role: Role,
    ) -> BoxFuture<'a, Result<Established, NetError>>;

    /// The acceptor's side: `me` got a connection from `remote`.
    fn accept<'a>(
        &'a self,
        io: &'a mut Transport,
        group: &'a Group,
        me: NodeId,
        remote: SocketAddr,
    ) -> BoxFuture<'a, Result<Established, NetError>>;

    /// The key that authenticates the root's job (its manifest) to the nodes, when the
    /// handshake has a group key ([`crate::auth::NoiseHandshake`]); None for a plain handshake.
    fn manifest_key(&self) -> Option<[u8; 32]> {
        None
    }
}

/// The handshake of [`crate::wire`]: group name, node ids, protocol and wire versions, in the
/// clear. No secret: anyone who knows the group file can join (authentication is a later issue).
#[derive(Copy, Clone, Debug, Default)]
pub struct PlainHandshake;

/// Reads one control frame (the caller bounds the time).
pub(crate) async fn read_control(io: &mut Transport, who: &str) -> Result<Control, NetError> {
    loop {
        match io.reader.next_frame() {
            Ok(Some(WireFrame::Control(c))) => return Ok(c),
            Ok(Some(WireFrame::Proto(m))) => {
                return Err(NetError::Handshake {
                    who: who.to_string(),
                    reason: format!("sent a {} frame before the handshake", m.kind()),
                })
            }
            Ok(None) => {}
            Err(e) => {
                return Err(NetError::Handshake {
                    who: who.to_string(),
                    reason: e.to_string(),
                })
            }
        }
        let n = io
            .stream
            .read_buf(io.reader.buffer_mut())
            .await
            .map_err(|e| NetError::Handshake {
                who: who.to_string(),
                reason: format!("read failed: {e}"),
            })?;
        if n == 0 {
            return Err(NetError::Handshake {
                who: who.to_string(),
                reason: "the connection closed during the handshake".into(),
            });
        }
    }
}

pub(crate) async fn write_control(
    io: &mut Transport,
    c: &Control,
    who: &str,
) -> Result<(), NetError> {
    io.stream
        .write_all(&c.encode())
        .await
        .map_err(|e| NetError::Handshake {
            who: who.to_string(),
            reason: format!("write failed: {e}"),
        })
}

/// Why a dialer must refuse the welcome of the node it dialed as `peer` (group, versions, node
/// id, the group's digest), or None. The plain
/// and the authenticated handshakes check exactly this.
pub(crate) fn welcome_problem(group: &Group, peer: NodeId, w: &Welcome) -> Option<String> {
    let them = format!("node {}", w.node);
    mismatch(group, &w.group, w.protocol_version, w.wire_version, &them)
        .or_else(|| {
        (w.node != peer).then(|| {
            format!(
                "node id mismatch: expected node {peer} at {}, but node {} answered (check the group file's addresses)",
                group.member(peer).map_or("?", |m| m.addr.as_str()),
                w.node
            )
        })
    })
    // Last: a more specific reason (wrong node at an address) tells the user more.
    .or_else(|| digest_problem(group, &w.group_digest, &them))
}

/// Why an acceptor `me` must refuse a dialer's hello (group, versions, node ids, the group's
/// digest), or None.
/// The plain and the authenticated handshakes check exactly this.
pub(crate) fn hello_problem(group: &Group, me: NodeId, hello: &Hello) -> Option<String> {
    let them = format!("the dialer (node {})", hello.from);
    mismatch(
        group,
        &hello.group,
        hello.protocol_version,
        hello.wire_version,
        &them,
    )
    .or_else(|| {
        (hello.to != me).then(|| {
            format!(
                "node id mismatch: the dialer expected node {} here, but this is node {me} (check the group file's addresses and --id)",
                hello.to
            )
        })
    })
    .or_else(|| {
        (!group.contains(hello.from) || hello.from == me).then(|| {
            format!(
                "the dialer claims to be node {}, which is not another member of group {:?} ({})",
                hello.from,
                group.name(),
                windrose_model::error::ids_in_words(group.len())
            )
        })
    })
    .or_else(|| digest_problem(group, &hello.group_digest, &them))
}

/// Why a peer whose group file has digest `theirs` must be refused, or None: both digests named,
/// so the user can tell which copy differs.
pub(crate) fn digest_problem(group: &Group, theirs: &str, them: &str) -> Option<String> {
    let mine = group.digest();
    if theirs == mine {
        return None;
    }
    Some(if theirs.is_empty() {
        format!(
            "group description mismatch: {them} sent no digest of its group file (an older \
             windrose?); this node's group {:?} has digest {mine}",
            group.name()
        )
    } else {
        format!(
            "group description mismatch: {them}'s copy of group {:?} has digest {theirs}, this \
             node's {mine} (members, addresses or clusters differ: give every member the same \
             group file)",
            group.name()
        )
    })
}

/// What the two sides must agree on, as a reason to reject when they do not.
pub(crate) fn mismatch(
    group: &Group,
    their_group: &str,
    their_protocol: u32,
    their_wire: u8,
    them: &str,
) -> Option<String> {
    if their_group != group.name() {
        return Some(format!(
            "group name mismatch: {them} is in group {their_group:?}, this node in group {:?}",
            group.name()
        ));
    }
    if their_protocol != PROTOCOL_VERSION {
        return Some(format!(
            "protocol version mismatch: {them} speaks version {their_protocol}, this node version {PROTOCOL_VERSION}"
        ));
    }
    if their_wire != WIRE_VERSION {
        return Some(format!(
            "wire format mismatch: {them} speaks version {their_wire}, this node version {WIRE_VERSION}"
        ));
    }
    None
}

impl Handshake for PlainHandshake {
    fn dial<'a>(
        &'a self,
        io: &'a mut Transport,
        group: &'a Group,
        me: NodeId,
        peer: NodeId,
        role: Role,
    ) -> BoxFuture<'a, Result<Established, NetError>> {
        Box::pin(async move {
            let who = group.describe(peer);
            let hello = Control::Hello(Hello {
                group: group.name().to_string(),
                protocol_version: PROTOCOL_VERSION,
                wire_version: WIRE_VERSION,
                from: me,
                to: peer,
                role,
                group_digest: group.digest(),
            });
            let sent = Instant::now();
            write_control(io, &hello, &who).await?;
            let answer = read_control(io, &who).await?;
            let rtt = sent.elapsed();
            let reject = |reason: String| NetError::Handshake {
                who: who.clone(),
                reason,
            };
            match answer {
                Control::Welcome(w) => {
                    let problem = welcome_problem(group, peer, &w);
                    if let Some(reason) = problem {
                        let _ = write_control(io, &Control::Reject(reason.clone()), &who).await;
                        return Err(reject(format!("rejected it: {reason}")));
                    }
                    Ok(Established {
                        peer,
                        role,
                        rtt: Some(rtt),
                        cipher: None,
                    })
                }
                Control::Reject(reason) => Err(reject(format!("it rejected us: {reason}"))),
                other => Err(reject(format!(
                    "expected a welcome, got a {} frame",
                    other.name()
                ))),
            }
        })
    }

    fn accept<'a>(
        &'a self,
        io: &'a mut Transport,
        group: &'a Group,
        me: NodeId,
        remote: SocketAddr,
    ) -> BoxFuture<'a, Result<Established, NetError>> {
        Box::pin(async move {
            crate::auth::refuse_if_keyed(io, me, remote).await?;
            let anonymous = format!("a connection from {remote}");
            let hello = match read_control(io, &anonymous).await? {
                Control::Hello(h) => h,
                other => {
                    return Err(NetError::Handshake {
                        who: anonymous,
                        reason: format!("expected a hello, got a {} frame", other.name()),
                    })
                }
            };
            let who = format!("node {} (from {remote})", hello.from);
            let problem = hello_problem(group, me, &hello);
            if let Some(reason) = problem {
                let _ = write_control(io, &Control::Reject(reason.clone()), &who).await;
                return Err(NetError::Handshake {
                    who,
                    reason: format!("rejected it: {reason}"),
                });
            }
            let welcome = Control::Welcome(Welcome {
                group: group.name().to_string(),
                protocol_version: PROTOCOL_VERSION,
                wire_version: WIRE_VERSION,
                node: me,
                group_digest: group.digest(),
            });
            write_control(io, &welcome, &who).await?;
            Ok(Established {
                peer: hello.from,
                role: hello.role,
                rtt: None,
                cipher: None,
            })
        })
    }
}
