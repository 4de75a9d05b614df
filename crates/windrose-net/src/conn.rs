//! Connections: dialing with retries and bounded exponential backoff, accepting, and the two
//! tasks that serve an established connection (a reader decoding frames, a writer doing
//! vectored writes of queued frames).

use crate::bootstrap::{Established, Handshake, Transport};
use crate::error::NetError;
use crate::group::Group;
use crate::secure::{self, Cipher};
use crate::wire::{FrameReader, Role, WireFrame, CONTROL_MAX_BODY};
use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use windrose_model::NodeId;
use windrose_proto::SendId;

/// First pause between connection attempts; doubled after each failure up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(25);
/// Longest pause between connection attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Bytes a reader asks for when it does not know the length of the next frame yet.
const SMALL_READ: usize = 16 << 10;
/// How far an encrypted connection's writer seals ahead of the socket: a few records, so
/// they are written while still in cache.
const SEAL_AHEAD: usize = 256 << 10;
/// Largest number of buffers in one vectored write.
const MAX_IOV: usize = 64;

/// An established, verified connection, not yet served.
pub(crate) struct Conn {
    pub(crate) peer: NodeId,
    pub(crate) role: Role,
    pub(crate) io: Transport,
    /// The session's keys when the data path is encrypted.
    pub(crate) cipher: Option<Arc<Cipher>>,
}

/// Something for a node's event loop.
pub(crate) enum Event {
    /// A connection was established (dialed or accepted).
    Conn(Conn),
    /// Dialing a peer failed for good.
    DialFailed(NodeId, NetError),
    /// An incoming connection failed its handshake (the reason, for the final error).
    AcceptFailed(NetError),
    /// A frame from a peer.
    Frame(LinkRef, WireFrame),
    /// The peer's stream ended: cleanly (None) or with an error.
    ReadEnd(LinkRef, Option<NetError>),
    /// The writer to the peer stopped: after a shutdown (None) or on an error.
    WriteEnd(LinkRef, Option<NetError>),
    /// The last byte of a notified send was written (its id, and when: a bandwidth meter
    /// needs the writer's time, not the time the loop got to the event).
    SendDone(LinkRef, SendId, Instant),
    /// A compute task finished: (task, blake3 hex, when it finished).
    ComputeDone(windrose_proto::TaskId, String, Instant),
}

/// The connection an event came from: the peer and which of its connections (a peer that
/// restarts gets a new one, and late events of the old one must not touch it).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct LinkRef {
    pub(crate) peer: NodeId,
    pub(crate) life: u64,
}

impl Event {
    /// The connection of a reader's or writer's event.
    pub(crate) fn link(&self) -> Option<LinkRef> {
        match self {
            Event::Frame(l, _)
            | Event::ReadEnd(l, _)
            | Event::WriteEnd(l, _)
            | Event::SendDone(l, _, _) => Some(*l),
            _ => None,
        }
    }
}

/// What a writer sends, in order.
pub(crate) enum Outgoing {
    /// A frame as its head and zero-copy payload; `notify` asks for [`Event::SendDone`].
    Frame {
        head: Bytes,
        payload: Bytes,
        notify: Option<SendId>,
    },
    /// Write what is before, then shut the sending half down and stop.
    Shutdown,
}

/// Byte counters of one connection, read by the event loop's throughput samples.
#[derive(Default)]
pub(crate) struct LinkStats {
    pub(crate) read_bytes: AtomicU64,
    pub(crate) written_bytes: AtomicU64,
    /// Bytes queued to this link and not yet written.
    pub(crate) queued: AtomicUsize,
}

/// Subtracts `n` from `a`, saturating at 0.
fn saturating_sub(a: &AtomicUsize, n: usize) -> usize {
    a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
        Some(q.saturating_sub(n))
    })
    .unwrap_or(0)
}

/// Releases a writer's unwritten bytes from its link's counter when the writer stops, however
/// it stops (returned, failed, or aborted by the event loop).
struct Release {
    stats: Arc<LinkStats>,
}

impl Drop for Release {
    fn drop(&mut self) {
        self.stats.queued.store(0, Ordering::Relaxed);
    }
}

/// Connects to `addr`, retrying with exponential backoff (from [`FIRST_BACKOFF`], doubling up to
/// [`MAX_BACKOFF`]) until `deadline`.
pub(crate) async fn connect_with_retry(
    peer: NodeId,
    addr: &str,
    deadline: Instant,
) -> Result<TcpStream, NetError> {
    let started = Instant::now();
    let mut backoff = FIRST_BACKOFF;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        let result =
            tokio::time::timeout(left.max(Duration::from_millis(1)), TcpStream::connect(addr))
                .await;
        let last = match result {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "connect timed out".to_string(),
        };
        let now = Instant::now();
        if now + backoff >= deadline {
            return Err(NetError::Unreachable {
                peer,
                addr: addr.to_string(),
                attempts,
                waited: started.elapsed(),
                last,
            });
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// What dialing and accepting need besides the peer: who we are and how to verify peers.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) group: Arc<Group>,
    pub(crate) handshake: Arc<dyn Handshake>,
    pub(crate) me: NodeId,
    pub(crate) max_body_len: u32,
    pub(crate) handshake_timeout: Duration,
    pub(crate) events: mpsc::Sender<Event>,
}

/// Dials `peer` and runs the handshake; the result goes to the endpoint's events. A handshake
/// that gets no answer within the endpoint's handshake timeout (a loaded machine) is tried
/// again on a fresh connection while `connect_deadline` allows another whole one; a refusal
/// is final.
pub(crate) async fn dial(ep: Endpoint, peer: NodeId, role: Role, connect_deadline: Instant) {
    let Endpoint {
        group,
        handshake,
        me,
        max_body_len,
        handshake_timeout,
        events,
    } = ep;
    let result = async {
        let addr = group
            .member(peer)
            .map(|m| m.addr.clone())
            .ok_or_else(|| NetError::Group(format!("node {peer} is not in the group")))?;
        let mut tries = 0u32;
        loop {
            tries += 1;
            let stream = connect_with_retry(peer, &addr, connect_deadline).await?;
            let mut io = Transport {
                stream,
                reader: FrameReader::new(max_body_len),
            };
            match tokio::time::timeout(
                handshake_timeout,
                handshake.dial(&mut io, &group, me, peer, role),
            )
            .await
            {
                Ok(est) => break Ok::<_, NetError>(conn_of(est?, io)),
                Err(_) if Instant::now() + handshake_timeout < connect_deadline => continue,
                Err(_) => {
                    break Err(NetError::Handshake {
                        who: group.describe(peer),
                        reason: format!(
                            "no answer within {handshake_timeout:?}, {tries} time(s) (the node \
                             is too busy, e.g. hundreds of handshakes at once on a loaded \
                             machine, or what listens there is not a windrose node)"
                        ),
                    })
                }
            }
        }
    }
    .await;
    let _ = events
        .send(match result {
            Ok(c) => Event::Conn(c),
            Err(e) => Event::DialFailed(peer, e),
        })
        .await;
}

fn conn_of(est: Established, mut io: Transport) -> Conn {
    io.reader.set_control_limit(CONTROL_MAX_BODY);
    Conn {
        peer: est.peer,
        role: est.role,
        io,
        cipher: est.cipher,
    }
}

/// Accepts connections forever, each handshake in its own task (bounded by the endpoint's
/// handshake timeout), results to its events.
pub(crate) async fn accept_loop(listener: TcpListener, ep: Endpoint) {
    let Endpoint {
        group,
        handshake,
        me,
        max_body_len,
        handshake_timeout,
        events,
    } = ep;
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(x) => x,
            Err(_) => {
                // Out of file descriptors and the like: pause rather than spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (group, handshake, events) = (group.clone(), handshake.clone(), events.clone());
        tokio::spawn(async move {
            let mut io = Transport {
                stream,
                reader: FrameReader::new(max_body_len),
            };
            let result = tokio::time::timeout(
                handshake_timeout,
                handshake.accept(&mut io, &group, me, remote),
            )
            .await
            .unwrap_or_else(|_| {
                Err(NetError::Handshake {
                    who: format!("a connection from {remote}"),
                    reason: format!("no hello within {handshake_timeout:?}"),
                })
            });
            let _ = events
                .send(match result {
                    Ok(est) => Event::Conn(conn_of(est, io)),
                    Err(e) => Event::AcceptFailed(e),
                })
                .await;
        });
    }
}

/// A reader's receive buffers, reused once every frame cut from them has been dropped, so a
/// long transfer does not allocate (and page-fault in) fresh memory for every frame.
#[derive(Default)]
struct BufferPool {
    /// Buffers given up; each may still be shared with frames in flight.
    old: VecDeque<BytesMut>,
}

impl BufferPool {
    /// Most buffers kept for reuse.
    const MAX: usize = 64;
    /// Smallest new buffer: one default frame (1 MiB of payload and its header) and change.
    const MIN_NEW: usize = (1 << 20) + 256;

    /// An empty buffer with room for `need` bytes: a reclaimed old one when possible (no
    /// frame cut from it is alive any more), else a new one.
    fn take(&mut self, need: usize) -> BytesMut {
        for _ in 0..self.old.len() {
            let Some(mut b) = self.old.pop_front() else {
                break;
            };
            b.clear();
            if b.try_reclaim(need) {
                return b;
            }
            self.old.push_back(b);
        }
        BytesMut::with_capacity(need.max(Self::MIN_NEW))
    }

    /// Keeps `b` (whose bytes may still be shared) for a later [`take`](Self::take).
    fn give(&mut self, b: BytesMut) {
        if self.old.len() < Self::MAX {
            self.old.push_back(b);
        }
    }

    /// Moves the bytes of `buf` (a partial frame, at most a small read) to a buffer with room
    /// for `limit` more.
    fn replace(&mut self, buf: &mut BytesMut, limit: usize) {
        let mut fresh = self.take(buf.len() + limit);
        fresh.extend_from_slice(buf);
        let old = std::mem::replace(buf, fresh);
        self.give(old);
    }
}

/// Reads frames from `rd` until the stream ends or fails.
pub(crate) async fn read_loop(
    link: LinkRef,
    mut rd: OwnedReadHalf,
    mut reader: FrameReader,
    cipher: Option<Arc<Cipher>>,
    events: mpsc::Sender<Event>,
    stats: Arc<LinkStats>,
) {
    let peer = link.peer;
    let mut pool = BufferPool::default();
    // Encrypted: each record is read straight into the frame buffer after the plaintext
    // received so far (with the next record's length field, which the opener keeps) and
    // decrypted there in place. `sealed` counts the bytes at the buffer's end that are still
    // sealed; frames are cut only when there are none. What the handshake read past its end
    // is opened first.
    let mut opener = cipher.map(|c| c.opener(peer));
    let mut sealed = 0usize;
    let mut leftover = BytesMut::new();
    if let Some(op) = &mut opener {
        let read_with_handshake = reader.buffer_mut().split();
        match op.start(read_with_handshake, reader.buffer_mut()) {
            Ok(rest) => leftover = rest,
            Err(e) => {
                let _ = events.send(Event::ReadEnd(link, Some(e))).await;
                return;
            }
        }
    }
    let end = loop {
        // Frames already buffered (e.g. read together with the handshake) first; none while
        // the buffer ends with sealed bytes.
        if sealed == 0 {
            loop {
                match reader.next_frame() {
                    Ok(Some(frame)) => {
                        if events.send(Event::Frame(link, frame)).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(source) => {
                        let _ = events
                            .send(Event::ReadEnd(link, Some(NetError::Wire { peer, source })))
                            .await;
                        return;
                    }
                }
            }
        }
        // Read exactly the rest of a frame whose header is known, so that every frame ends up
        // alone in one allocation: no partial frame is ever copied to a larger buffer, and the
        // allocation is freed (and reused) as soon as the frame's payload is dropped. Without a
        // header, read a little (several small frames, or the start of a large one).
        let read = match &mut opener {
            Some(op) => match op.next_len() {
                Err(e) => break Some(e),
                Ok(None) => rd.read(op.head_room()).await.inspect(|&n| op.head_read(n)),
                Ok(Some(len)) if sealed >= len => {
                    let buf = reader.buffer_mut();
                    if let Err(e) = op.open_at(buf, buf.len() - sealed) {
                        break Some(e);
                    }
                    sealed = 0;
                    continue;
                }
                Ok(Some(len)) => {
                    // The rest of the record and the next one's length field, into a buffer
                    // with room for them and, at the start of a record that does not end its
                    // frame, for the rest of the frame and the record that ends it (so that,
                    // as on the clear path, no completed frame is ever moved).
                    let want = len + secure::LEN - sealed;
                    let missing = if sealed == 0 {
                        reader.missing_hint()
                    } else {
                        0
                    };
                    let rest = missing.saturating_sub(len - secure::TAG);
                    let need = match rest {
                        0 => want,
                        _ => want + rest + secure::RECORD_SPAN,
                    };
                    let buf = reader.buffer_mut();
                    if buf.capacity() - buf.len() < need {
                        pool.replace(buf, need);
                    }
                    if !leftover.is_empty() {
                        // Once only: the record's start, read with the handshake.
                        reader.buffer_mut().extend_from_slice(&leftover);
                        sealed += std::mem::take(&mut leftover).len();
                        continue;
                    }
                    rd.read_buf(&mut bytes::BufMut::limit(reader.buffer_mut(), want))
                        .await
                        .inspect(|&n| sealed += n)
                }
            },
            None => {
                let missing = reader.missing_hint();
                let limit = if missing > 0 { missing } else { SMALL_READ };
                let buf = reader.buffer_mut();
                if buf.capacity() - buf.len() < limit {
                    pool.replace(buf, limit);
                }
                rd.read_buf(&mut bytes::BufMut::limit(buf, limit)).await
            }
        };
        match read {
            Ok(0) => {
                let unfinished = opener.as_ref().map_or(0, |op| op.unfinished(sealed));
                if unfinished > 0 {
                    break Some(NetError::PeerMisbehaved {
                        peer,
                        what: format!(
                            "closed its encrypted stream in the middle of a record ({unfinished} bytes of it received)"
                        ),
                    });
                }
                break reader
                    .eof_error()
                    .map(|source| NetError::Wire { peer, source });
            }
            Ok(n) => {
                stats.read_bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) => {
                let mut what = format!("reading from node {peer}");
                if let Some(crate::wire::WireError::Truncated { buffered, .. }) = reader.eof_error()
                {
                    what.push_str(&format!(
                        " (the connection failed in the middle of a frame, {buffered} bytes of it received)"
                    ));
                }
                break Some(NetError::Io { what, source: e });
            }
        }
    };
    let _ = events.send(Event::ReadEnd(link, end)).await;
}

/// A frame's records in a buffer that goes back to its writer's spares once the frame is
/// written (dropped), still initialized, to seal a later frame over.
struct SealedFrame {
    buf: Vec<u8>,
    len: usize,
    spares: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl SealedFrame {
    /// Most spare buffers a writer keeps: a few frames' worth (it seals at most
    /// `SEAL_AHEAD` bytes, or one frame, ahead of the socket).
    const SPARES: usize = 4;
}

impl AsRef<[u8]> for SealedFrame {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for SealedFrame {
    fn drop(&mut self) {
        let mut spares = lock(&self.spares);
        if spares.len() < Self::SPARES {
            spares.push(std::mem::take(&mut self.buf));
        }
    }
}

/// The spare buffers of a writer (only it and its frames' drops take the lock).
fn lock(spares: &Mutex<Vec<Vec<u8>>>) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
    spares
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Writes queued frames to `wr` in order with vectored writes; reports notified sends, flush
/// markers and its end. A write that makes no progress for `stall` fails the connection.
#[allow(clippy::too_many_arguments)] // the link's parts, each used apart
pub(crate) async fn write_loop(
    link: LinkRef,
    mut wr: OwnedWriteHalf,
    cipher: Option<Arc<Cipher>>,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    events: mpsc::Sender<Event>,
    stats: Arc<LinkStats>,
    stall: Duration,
) {
    let peer = link.peer;
    let _release = Release {
        stats: stats.clone(),
    };
    let mut queue: VecDeque<Outgoing> = VecDeque::new();
    // Encrypted: frames are sealed into records just before they are written, at most
    // `SEAL_AHEAD` bytes ahead of the socket (`sealed` frames at the queue's front), so the
    // records are written while still in cache, each frame's into a buffer that comes back to
    // `spares` once written: the next frames are sealed over memory already in use, neither
    // fresh (page faults) nor cleared first. The counters grow by the records' overhead, which
    // the writes then take off again.
    // `ahead` counts the sealed bytes not written yet (the sealing adds, the writes take off).
    let mut sealer = cipher.map(|c| c.sealer());
    let encrypted = sealer.is_some();
    let spares: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let mut sealed = 0usize;
    let mut ahead = 0usize;
    let mut seal_ahead = |queue: &mut VecDeque<Outgoing>, sealed: &mut usize, ahead: &mut usize| {
        let Some(sealer) = &mut sealer else {
            *sealed = queue.len();
            return Ok::<(), NetError>(());
        };
        while *sealed < queue.len() && (*ahead < SEAL_AHEAD || *sealed == 0) {
            if let Outgoing::Frame { head, payload, .. } = &mut queue[*sealed] {
                let plain = head.len() + payload.len();
                let len = secure::sealed_len(plain);
                let mut buf = lock(&spares).pop().unwrap_or_default();
                if buf.len() < len {
                    buf.resize(len, 0);
                }
                sealer.seal_into(head, payload, &mut buf[..len])?;
                stats.queued.fetch_add(len - plain, Ordering::Relaxed);
                *ahead += len;
                *head = Bytes::from_owner(SealedFrame {
                    buf,
                    len,
                    spares: spares.clone(),
                });
                *payload = Bytes::new();
            }
            *sealed += 1;
        }
        Ok(())
    };
    let result: Result<bool, NetError> = async {
        loop {
            if queue.is_empty() {
                match rx.recv().await {
                    Some(o) => queue.push_back(o),
                    None => return Ok(false),
                }
            }
            while queue.len() < 4 * MAX_IOV {
                match rx.try_recv() {
                    Ok(o) => queue.push_back(o),
                    Err(_) => break,
                }
            }
            seal_ahead(&mut queue, &mut sealed, &mut ahead)?;
            if let Some(Outgoing::Shutdown) = queue.front() {
                let _ = tokio::time::timeout(stall, wr.shutdown()).await;
                return Ok(true);
            }
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(MAX_IOV);
            for o in queue.iter().take(sealed) {
                let Outgoing::Frame { head, payload, .. } = o else {
                    break;
                };
                for part in [head, payload] {
                    if !part.is_empty() && slices.len() < MAX_IOV {
                        slices.push(IoSlice::new(part));
                    }
                }
                if slices.len() >= MAX_IOV {
                    break;
                }
            }
            let n = match tokio::time::timeout(stall, wr.write_vectored(&slices)).await {
                Err(_) => {
                    return Err(NetError::Timeout {
                        what: format!("node {peer} to accept data (it stopped reading)"),
                        waited: stall,
                    })
                }
                Ok(Err(e)) => {
                    return Err(NetError::Io {
                        what: format!("writing to node {peer}"),
                        source: e,
                    })
                }
                Ok(Ok(0)) => {
                    return Err(NetError::Io {
                        what: format!("writing to node {peer}"),
                        source: std::io::ErrorKind::WriteZero.into(),
                    })
                }
                Ok(Ok(n)) => n,
            };
            drop(slices);
            if encrypted {
                // Only sealed frames are written: every byte written was sealed ahead.
                ahead -= n;
            }
            stats.written_bytes.fetch_add(n as u64, Ordering::Relaxed);
            let written_at = Instant::now();
            let mut left = n;
            while let Some(Outgoing::Frame {
                head,
                payload,
                notify,
            }) = queue.front_mut()
            {
                let k = left.min(head.len());
                head.advance(k);
                left -= k;
                let k = left.min(payload.len());
                payload.advance(k);
                left -= k;
                if !head.is_empty() || !payload.is_empty() {
                    break;
                }
                let notify = *notify;
                queue.pop_front();
                sealed -= 1;
                if let Some(id) = notify {
                    let _ = events.send(Event::SendDone(link, id, written_at)).await;
                }
            }
            saturating_sub(&stats.queued, n);
        }
    }
    .await;
    let _ = events.send(Event::WriteEnd(link, result.err())).await;
}

/// Tells a connection's peer why it is refused, then drops it (in the background).
pub(crate) fn refuse(c: Conn, reason: String) {
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut stream = c.io.stream;
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            stream.write_all(&crate::wire::Control::Abort(reason).encode()),
        )
        .await;
        let _ = stream.shutdown().await;
    });
}

/// A connection being served: where its frames are queued, its counters, and the reader and
/// writer tasks (which report to the driver's event channel under its [`LinkRef`]).
pub(crate) struct Served {
    pub(crate) tx: mpsc::UnboundedSender<Outgoing>,
    pub(crate) stats: Arc<LinkStats>,
    pub(crate) reader: JoinHandle<()>,
    pub(crate) writer: JoinHandle<()>,
}

/// Starts the reader and writer of an established connection: one place for both drivers.
pub(crate) fn serve(
    c: Conn,
    link: LinkRef,
    events: &mpsc::Sender<Event>,
    stall: Duration,
) -> Served {
    let (rd, wr) = c.io.stream.into_split();
    let stats = Arc::new(LinkStats::default());
    let (tx, rx) = mpsc::unbounded_channel();
    let reader = tokio::spawn(read_loop(
        link,
        rd,
        c.io.reader,
        c.cipher.clone(),
        events.clone(),
        stats.clone(),
    ));
    let writer = tokio::spawn(write_loop(
        link,
        wr,
        c.cipher,
        rx,
        events.clone(),
        stats.clone(),
        stall,
    ));
    Served {
        tx,
        stats,
        reader,
        writer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secure::tests::session;
    use crate::secure::{whole_records, RECORD_PLAIN};
    use crate::wire::Control;
    use rand::{Rng, SeedableRng};
    use tokio::io::AsyncWriteExt;

    /// How long a test waits for the next event before it calls the reader stuck (a bound on
    /// a hang, not a timed assertion).
    const STUCK: Duration = Duration::from_secs(60);

    /// Control frames of every size around a record's (and of several records), each filled
    /// with its own letter.
    fn frames() -> Vec<Control> {
        let r = RECORD_PLAIN;
        let sizes = [1, 1000, r - 30, r - 11, r - 10, r - 9, r, r + 1, 3 * r + 5];
        sizes
            .into_iter()
            .chain([1 << 20, (2 << 20) + 3])
            .cycle()
            .take(3 * (sizes.len() + 2))
            .enumerate()
            .map(|(i, n)| Control::Abort(((b'a' + (i % 26) as u8) as char).to_string().repeat(n)))
            .collect()
    }

    /// A reader of the accepted end of a loopback connection whose other end is returned,
    /// sending its events to a channel of one (a slow event loop holds the reader at once).
    async fn encrypted_reader(
        cipher: Arc<Cipher>,
        handshake_leftover: &[u8],
    ) -> (
        TcpStream,
        mpsc::Receiver<Event>,
        Arc<LinkStats>,
        (JoinHandle<()>, OwnedWriteHalf),
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (ours, _) = listener.accept().await.unwrap();
        let (rd, wr) = ours.into_split();
        let mut reader = FrameReader::new(1 << 20);
        reader.set_control_limit(CONTROL_MAX_BODY);
        reader.push(handshake_leftover);
        let (events, rx) = mpsc::channel(1);
        let stats = Arc::new(LinkStats::default());
        let link = LinkRef {
            peer: NodeId(0),
            life: 0,
        };
        let task = tokio::spawn(read_loop(
            link,
            rd,
            reader,
            Some(cipher),
            events,
            stats.clone(),
        ));
        // Our writing half goes back too, so that only the peer closes.
        (peer, rx, stats, (task, wr))
    }

    /// The next event: a control frame (Ok) or the end of the stream (Err, with its error).
    async fn next(rx: &mut mpsc::Receiver<Event>) -> Result<Control, Option<NetError>> {
        match tokio::time::timeout(STUCK, rx.recv()).await {
            Err(_) => panic!("the reader is stuck: no event for {STUCK:?}"),
            Ok(Some(Event::Frame(_, WireFrame::Control(c)))) => Ok(c),
            Ok(Some(Event::ReadEnd(_, end))) => Err(end),
            Ok(Some(_)) => panic!("a reader sent an event other than a frame or its end"),
            Ok(None) => panic!("the reader ended without saying so"),
        }
    }

    /// A sealed stream written in pieces of random sizes to a reader whose event loop takes
    /// its time: every frame arrives whole and in order, the stream's end is clean, and every
    /// byte read is counted. The event channel of one and the socket's buffers fill, so the
    /// reading waits on the event loop and the peer's writing on the reading.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_reader_gets_every_frame_of_an_encrypted_stream_in_order() {
        let (ci, cr, _, _) = session();
        let want = frames();
        let mut stream = BytesMut::new();
        let mut sealer = ci.sealer();
        for c in &want {
            sealer.seal(&c.encode(), &[], &mut stream).unwrap();
        }
        let (mut peer, mut rx, stats, _ours) = encrypted_reader(cr, &[]).await;
        let len = stream.len();
        let writer = tokio::spawn(async move {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(21);
            let mut at = 0;
            while at < stream.len() {
                let n = rng.gen_range(1..=300_000).min(stream.len() - at);
                peer.write_all(&stream[at..at + n]).await.unwrap();
                at += n;
            }
            peer.shutdown().await.unwrap();
            peer
        });
        for (i, c) in want.iter().enumerate() {
            let got = next(&mut rx).await.unwrap_or_else(|e| {
                panic!("the stream ended before frame {i}: {e:?}");
            });
            assert!(got == *c, "frame {i} differs");
            // The slow event loop: the reader waits for it meanwhile.
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        let end = next(&mut rx).await.map(|_| ()).unwrap_err();
        assert!(end.is_none(), "a clean end expected: {end:?}");
        drop(writer.await.unwrap());
        assert_eq!(stats.read_bytes.load(Ordering::Relaxed), len as u64);
    }

    /// Records the handshake read past its end are opened before anything more arrives (the
    /// peer sends nothing until it sees them); the record cut at the leftover's end is
    /// completed by the next read; and a stream that ends inside a record is an error that
    /// says so.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_read_with_the_handshake_come_first_and_a_cut_record_is_an_error() {
        let (ci, cr, _, _) = session();
        let want = frames();
        let mut stream = BytesMut::new();
        let mut sealer = ci.sealer();
        for c in &want[..3] {
            sealer.seal(&c.encode(), &[], &mut stream).unwrap();
        }
        // The first two frames whole, then half of the third's first record.
        let two = whole_records(&stream[..stream.len() - 1]);
        let cut = two + (stream.len() - two) / 2;
        let (mut peer, mut rx, _stats, _ours) = encrypted_reader(cr, &stream[..cut]).await;
        for c in &want[..2] {
            assert!(next(&mut rx).await.unwrap() == *c);
        }
        peer.write_all(&stream[cut..]).await.unwrap();
        assert!(next(&mut rx).await.unwrap() == want[2]);
        // Half of one more record, then the end.
        let mut more = BytesMut::new();
        sealer.seal(&want[3].encode(), &[], &mut more).unwrap();
        peer.write_all(&more[..7]).await.unwrap();
        peer.shutdown().await.unwrap();
        let end = next(&mut rx).await.map(|_| ()).unwrap_err();
        let end = end.expect("an error").to_string();
        assert!(
            end.contains("closed its encrypted stream in the middle of a record (7 bytes"),
            "{end}"
        );
    }
}
