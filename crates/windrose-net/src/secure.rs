//! Optional encryption of the data path (`--encrypt`): after a keyed handshake in which both
//! sides asked for it, every byte a connection carries (control and protocol frames alike)
//! travels in Noise transport messages made with that session's keys (AES-256-GCM), so a
//! peer on the path can neither read the data nor change a byte of it unnoticed.
//!
//! On the wire the stream is a sequence of **records**: a 4-byte big-endian length, then that
//! many bytes of ciphertext and its 16-byte tag, with up to [`RECORD_PLAIN`] bytes of
//! plaintext (a default frame and its header: one record per frame). Each direction numbers
//! its records from its first transport message on (the dialer's handshake confirmation was
//! its record 0), and that number is the AEAD nonce, as Noise's AESGCM forms it: a record
//! dropped, repeated, reordered or altered fails to decrypt, and the connection fails. A
//! length beyond the largest record fails the connection before anything is buffered.
//!
//! The records use Noise's cipher and nonces on the session's two keys (snow's raw split), but
//! not its 64 KiB message limit: a record under 64 KiB is a Noise transport message (a test
//! opens ours with snow's transport state and the other way round), and a frame is one record
//! however large, so the reader reads a frame with one call, as on the clear path, where
//! Noise-sized records took sixteen reads and sixteen cipher calls per frame. The keys are
//! used by aws-lc-rs's AES-256-GCM directly: it encrypts from the frame into the send buffer
//! and decrypts in place in the frame buffer, so each side touches every byte once beyond the
//! clear path's copies, and its AES-GCM (VAES/AVX-512 where the CPU has them) takes half the
//! CPU per byte of the ring snow itself uses for the handshake. The writer seals a frame just
//! before writing it, into a reused buffer; the reader reads each record straight into the
//! frame reader's reused buffers and opens it there, so neither side page-faults fresh memory
//! for every frame (that, not the cipher, was most of the cost once). The goodput example
//! measures the remaining cost against the cipher's own CPU; encryption stays off by default.

use crate::error::NetError;
use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use bytes::{Buf, BytesMut};
use std::sync::Arc;
use windrose_model::NodeId;

/// Largest plaintext of one record: a default frame (1 MiB of payload) and its header, so that
/// a frame travels as one record, read with one call and opened with one.
pub const RECORD_PLAIN: usize = (1 << 20) + 4096;
/// Bytes of a record's tag.
pub(crate) const TAG: usize = 16;
/// Bytes of a record's length field.
pub(crate) const LEN: usize = 4;
/// Most bytes one record takes on the wire (its length field, ciphertext and tag).
pub(crate) const RECORD_SPAN: usize = LEN + RECORD_PLAIN + TAG;

/// Bytes `plain` bytes take as records (sealed by one call of [`Sealer::seal`]).
pub(crate) fn sealed_len(plain: usize) -> usize {
    plain + plain.div_ceil(RECORD_PLAIN) * (LEN + TAG)
}

/// Bytes of the whole records at the front of `sealed` (by their length fields alone: a
/// length shorter than a tag is for the opener to refuse).
#[cfg(test)]
pub(crate) fn whole_records(sealed: &[u8]) -> usize {
    let mut at = 0;
    while let Some(head) = sealed.get(at..at + LEN) {
        let end = at + LEN + u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if end > sealed.len() {
            break;
        }
        at = end;
    }
    at
}

/// The keys of one encrypted connection and where each direction's record numbers start.
pub struct Cipher {
    send: LessSafeKey,
    recv: LessSafeKey,
    first_send: u64,
    first_recv: u64,
}

/// Noise's AESGCM nonce: 32 zero bits, then the record number big-endian.
fn nonce(n: u64) -> Nonce {
    let mut bytes = [0u8; 12];
    bytes[4..].copy_from_slice(&n.to_be_bytes());
    Nonce::assume_unique_for_key(bytes)
}

impl Cipher {
    /// The keys of a finished handshake, from snow's split (the initiator sends with the first
    /// key); `first_send` and `first_recv` are the numbers of the first data records each way
    /// (after the handshake's own transport messages).
    pub(crate) fn new(
        hs: &mut snow::HandshakeState,
        first_send: u64,
        first_recv: u64,
    ) -> Result<Arc<Cipher>, NetError> {
        let (initiator_key, responder_key) = hs.dangerously_get_raw_split();
        let (send, recv) = if hs.is_initiator() {
            (initiator_key, responder_key)
        } else {
            (responder_key, initiator_key)
        };
        let key = |k: [u8; 32]| {
            UnboundKey::new(&AES_256_GCM, &k)
                .map(LessSafeKey::new)
                .map_err(|_| NetError::Failed("the session's AES-256-GCM key was refused".into()))
        };
        Ok(Arc::new(Cipher {
            send: key(send)?,
            recv: key(recv)?,
            first_send,
            first_recv,
        }))
    }

    pub(crate) fn sealer(self: &Arc<Self>) -> Sealer {
        Sealer {
            next: self.first_send,
            cipher: self.clone(),
        }
    }

    pub(crate) fn opener(self: &Arc<Self>, peer: NodeId) -> Opener {
        Opener {
            next: self.first_recv,
            cipher: self.clone(),
            peer,
            records: 0,
            head: [0; LEN],
            head_got: 0,
        }
    }
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cipher(..)")
    }
}

/// Encrypts what one connection sends.
pub(crate) struct Sealer {
    cipher: Arc<Cipher>,
    next: u64,
}

impl Sealer {
    /// Seals `head` and then `payload` (a frame's two parts, in one record when they fit) as
    /// records into `out`, which must be [`sealed_len`] of their total long: each record is
    /// encrypted straight from them into `out`, so no plaintext is copied to be encrypted in
    /// place (on the sender that copy cost as much CPU as the cipher), and `out` may be a
    /// reused buffer that needs no clearing.
    pub(crate) fn seal_into(
        &mut self,
        head: &[u8],
        payload: &[u8],
        out: &mut [u8],
    ) -> Result<(), NetError> {
        let (h, total) = (head.len(), head.len() + payload.len());
        assert_eq!(out.len(), sealed_len(total), "a sealed frame's room");
        let (mut at, mut o) = (0, 0);
        while at < total {
            let end = (at + RECORD_PLAIN).min(total);
            let (from_head, from_payload) = (
                &head[at.min(h)..end.min(h)],
                &payload[at.max(h) - h..end.max(h) - h],
            );
            let record = &mut out[o..o + LEN + end - at + TAG];
            let (field, sealed) = record.split_at_mut(LEN);
            field.copy_from_slice(&((end - at + TAG) as u32).to_be_bytes());
            let (head_out, rest) = sealed.split_at_mut(from_head.len());
            self.cipher
                .send
                .seal_out_of_place_scatter(
                    nonce(self.next),
                    Aad::empty(),
                    from_head,
                    head_out,
                    from_payload,
                    rest,
                )
                .map_err(|_| NetError::Failed("encrypting a record failed".into()))?;
            self.next += 1;
            o += record.len();
            at = end;
        }
        Ok(())
    }

    /// Appends `head` and then `payload` to `out` as records.
    #[cfg(test)]
    pub(crate) fn seal(
        &mut self,
        head: &[u8],
        payload: &[u8],
        out: &mut BytesMut,
    ) -> Result<(), NetError> {
        let at = out.len();
        out.resize(at + sealed_len(head.len() + payload.len()), 0);
        self.seal_into(head, payload, &mut out[at..])
    }
}

/// Decrypts what one connection receives.
///
/// The reader takes each record's length field here, then reads the record itself straight
/// into the frame buffer after the plaintext received so far, together with the next record's
/// length field, and [`open_at`](Self::open_at) decrypts it in place: the socket's bytes are
/// copied once (by the kernel) and decrypted once, with no staging buffer between them.
pub(crate) struct Opener {
    cipher: Arc<Cipher>,
    next: u64,
    peer: NodeId,
    records: u64,
    /// The next record's length field, `head_got` bytes of it received.
    head: [u8; LEN],
    head_got: usize,
}

impl Opener {
    /// The plaintext length of the record at the front of `sealed`, once it is complete
    /// (None: more bytes are needed); a length shorter than a tag fails the connection.
    pub(crate) fn front_len(&self, sealed: &[u8]) -> Result<Option<usize>, NetError> {
        if sealed.len() < LEN {
            return Ok(None);
        }
        let len = self.checked_len([sealed[0], sealed[1], sealed[2], sealed[3]])?;
        Ok((sealed.len() >= LEN + len).then_some(len - TAG))
    }

    /// Decrypts the complete record at the front of `sealed` (removing it) and appends its
    /// plaintext to `plain`; false when no complete record is there. A record that does not
    /// decrypt fails the connection.
    pub(crate) fn open_one(
        &mut self,
        sealed: &mut BytesMut,
        plain: &mut BytesMut,
    ) -> Result<bool, NetError> {
        if self.front_len(sealed)?.is_none() {
            return Ok(false);
        }
        let len = self.checked_len([sealed[0], sealed[1], sealed[2], sealed[3]])?;
        let record = &mut sealed[LEN..LEN + len];
        let (body, tag) = record.split_at_mut(len - TAG);
        self.open_in_place(body, tag)?;
        plain.extend_from_slice(body);
        sealed.advance(LEN + len);
        Ok(true)
    }

    /// Opens the complete records of `sealed` (what the handshake read past its end) into
    /// `plain`, then takes the next length field from what is left; returns the rest (the
    /// next record's first bytes after its length field, for the reader to put at the end of
    /// the frame buffer once the frames before it are cut).
    pub(crate) fn start(
        &mut self,
        mut sealed: BytesMut,
        plain: &mut BytesMut,
    ) -> Result<BytesMut, NetError> {
        while self.open_one(&mut sealed, plain)? {}
        let head = sealed.len().min(LEN);
        self.head[..head].copy_from_slice(&sealed[..head]);
        self.head_got = head;
        self.next_len()?;
        sealed.advance(head);
        Ok(sealed)
    }

    /// The sealed length (ciphertext and tag) of the next record, once its length field is
    /// whole; a length shorter than a tag fails the connection.
    pub(crate) fn next_len(&self) -> Result<Option<usize>, NetError> {
        if self.head_got < LEN {
            return Ok(None);
        }
        self.checked_len(self.head).map(Some)
    }

    /// A record's sealed length from its length field: from a tag's length (an empty record)
    /// up to the largest record, which bounds what a peer makes this side hold unverified.
    fn checked_len(&self, field: [u8; LEN]) -> Result<usize, NetError> {
        let len = u32::from_be_bytes(field) as usize;
        if len < TAG {
            return Err(self.broken(format!("a record of {len} bytes, shorter than its tag")));
        }
        if len > RECORD_PLAIN + TAG {
            return Err(self.broken(format!(
                "a record of {len} bytes, longer than the largest ({})",
                RECORD_PLAIN + TAG
            )));
        }
        Ok(len)
    }

    /// Where the rest of the next record's length field is read to.
    pub(crate) fn head_room(&mut self) -> &mut [u8] {
        &mut self.head[self.head_got..]
    }

    /// `n` more bytes of the length field were read into [`head_room`](Self::head_room).
    pub(crate) fn head_read(&mut self, n: usize) {
        self.head_got += n;
    }

    /// Bytes received of the unfinished record whose `body` bytes after its length field end
    /// the frame buffer (0: the stream is between records).
    pub(crate) fn unfinished(&self, body: usize) -> usize {
        self.head_got + body
    }

    /// Decrypts in place the record whose sealed bytes (after its length field, taken here)
    /// are `buf[at..]`, possibly followed by the first bytes of the next record's length
    /// field: its plaintext stays at `buf[at..]` and the buffer ends there; the bytes after
    /// it become the next length field.
    pub(crate) fn open_at(&mut self, buf: &mut BytesMut, at: usize) -> Result<(), NetError> {
        let len = self
            .next_len()?
            .expect("a record is opened only once its length is known");
        let (record, next) = buf[at..].split_at_mut(len);
        debug_assert!(
            next.len() <= LEN,
            "at most the next length field follows a record"
        );
        let (body, tag) = record.split_at_mut(len - TAG);
        self.open_in_place(body, tag)?;
        self.head[..next.len()].copy_from_slice(next);
        self.head_got = next.len();
        buf.truncate(at + len - TAG);
        Ok(())
    }

    fn open_in_place(&mut self, body: &mut [u8], tag: &[u8]) -> Result<(), NetError> {
        self.cipher
            .recv
            .open_in_place_separate_tag(nonce(self.next), Aad::empty(), tag, body)
            .map_err(|_| {
                self.broken(format!(
                    "record {} does not decrypt with this session's keys (altered, replayed or out of order)",
                    self.records
                ))
            })?;
        self.next += 1;
        self.records += 1;
        Ok(())
    }

    /// Decrypts every complete record at the front of `sealed` into `plain`.
    #[cfg(test)]
    fn open(&mut self, sealed: &mut BytesMut, plain: &mut BytesMut) -> Result<(), NetError> {
        while self.open_one(sealed, plain)? {}
        Ok(())
    }

    fn broken(&self, what: String) -> NetError {
        NetError::PeerMisbehaved {
            peer: self.peer,
            what: format!("sent an encrypted stream that fails its check: {what}"),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A finished NNpsk0 handshake: both sides' ciphers (the initiator's data records start
    /// at 1, as the dialer's), and snow's own transport states for the same session.
    pub(crate) fn session() -> (
        Arc<Cipher>,
        Arc<Cipher>,
        snow::StatelessTransportState,
        snow::StatelessTransportState,
    ) {
        let params: snow::params::NoiseParams = crate::auth::NOISE_PARAMS.parse().unwrap();
        let psk = [7u8; 32];
        let mut i = snow::Builder::new(params.clone())
            .psk(0, &psk)
            .build_initiator()
            .unwrap();
        let mut r = snow::Builder::new(params)
            .psk(0, &psk)
            .build_responder()
            .unwrap();
        let (mut buf, mut out) = (vec![0u8; 1024], vec![0u8; 1024]);
        let n = i.write_message(b"hello", &mut buf).unwrap();
        r.read_message(&buf[..n], &mut out).unwrap();
        let n = r.write_message(b"welcome", &mut buf).unwrap();
        i.read_message(&buf[..n], &mut out).unwrap();
        let (ci, cr) = (
            Cipher::new(&mut i, 1, 0).unwrap(),
            Cipher::new(&mut r, 0, 1).unwrap(),
        );
        (
            ci,
            cr,
            i.into_stateless_transport_mode().unwrap(),
            r.into_stateless_transport_mode().unwrap(),
        )
    }

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 131 % 251) as u8).collect()
    }

    /// A record under 64 KiB is a Noise transport message: snow's transport state opens what
    /// we seal, with the record number as its nonce, and we open what it seals.
    #[test]
    fn records_under_64_kib_are_noise_transport_messages_both_ways() {
        let (ci, _, _, tr) = session();
        let pieces = [(1, 0), (10, 990), (0, 65535 - TAG), (40, 20_000)];
        let mut sealer = ci.sealer();
        let mut sealed = BytesMut::new();
        for (h, p) in pieces {
            let data = payload(h + p);
            sealer.seal(&data[..h], &data[h..], &mut sealed).unwrap();
        }
        let (mut at, mut nonce) = (0, 1u64);
        let mut buf = vec![0u8; 65535];
        for (h, p) in pieces {
            let len = u32::from_be_bytes(sealed[at..at + LEN].try_into().unwrap()) as usize;
            assert_eq!(len, h + p + TAG, "one record per seal");
            let n = tr
                .read_message(nonce, &sealed[at + LEN..at + LEN + len], &mut buf)
                .unwrap();
            assert_eq!(&buf[..n], &payload(h + p)[..]);
            at += LEN + len;
            nonce += 1;
        }
        assert_eq!(at, sealed.len());

        // The responder's direction, sealed by snow from record 0, opened by our opener.
        let data = payload(3 * 65519 + 1000);
        let mut stream = BytesMut::new();
        let mut rec = vec![0u8; 65535];
        for (k, chunk) in data.chunks(65519).enumerate() {
            let n = tr.write_message(k as u64, chunk, &mut rec).unwrap();
            stream.extend_from_slice(&(n as u32).to_be_bytes());
            stream.extend_from_slice(&rec[..n]);
        }
        let mut plain = BytesMut::new();
        ci.opener(NodeId(1)).open(&mut stream, &mut plain).unwrap();
        assert_eq!(&plain[..], &data[..]);
        assert!(stream.is_empty());
    }

    /// A frame's head and payload go in one record when they fit, and records of the largest
    /// size are cut anywhere across the two parts; the opener gets the bytes back in order.
    #[test]
    fn head_and_payload_are_cut_into_records_of_the_largest_size() {
        let (ci, cr, _, _) = session();
        let r = RECORD_PLAIN;
        for (h, p, records) in [
            (40, 1 << 20, 1),
            (0, r, 1),
            (40, r - 40, 1),
            (40, r - 39, 2),
            (r + 5, 10, 2),
            (7, 3 * r + 1000, 4),
        ] {
            let data = payload(h + p);
            let mut sealed = BytesMut::new();
            ci.sealer()
                .seal(&data[..h], &data[h..], &mut sealed)
                .unwrap();
            assert_eq!(sealed.len(), sealed_len(h + p), "{h} + {p}");
            assert_eq!(sealed.len() - (h + p), records * (LEN + TAG), "{h} + {p}");
            let mut plain = BytesMut::new();
            cr.opener(NodeId(0)).open(&mut sealed, &mut plain).unwrap();
            assert!(plain[..] == data[..], "{h} + {p}");
        }
    }

    /// A length field beyond the largest record (or below a tag) fails the connection as soon
    /// as it is read, whether in what the handshake read or in the reader's own reads.
    #[test]
    fn a_record_longer_than_the_largest_is_refused_at_its_length_field() {
        let (_, cr, _, _) = session();
        for (len, says) in [
            (RECORD_PLAIN + TAG + 1, "longer than the largest"),
            (u32::MAX as usize, "longer than the largest"),
            (TAG - 1, "shorter than its tag"),
        ] {
            let field = (len as u32).to_be_bytes();
            let mut opener = cr.opener(NodeId(0));
            let err = opener
                .start(BytesMut::from(&field[..]), &mut BytesMut::new())
                .map(|_| ())
                .unwrap_err();
            assert!(err.to_string().contains(says), "{len}: {err}");
            let mut opener = cr.opener(NodeId(0));
            opener.head_room().copy_from_slice(&field);
            opener.head_read(LEN);
            let err = opener.next_len().unwrap_err();
            assert!(err.to_string().contains(says), "{len}: {err}");
        }
    }

    /// Records split anywhere across reads are opened once complete; an altered, replayed or
    /// reordered record fails the connection.
    #[test]
    fn partial_reads_wait_and_tampering_fails() {
        let (ci, cr, _, _) = session();
        let data = payload(2 * RECORD_PLAIN + 77);
        let mut sealed = BytesMut::new();
        ci.sealer().seal(&data, &[], &mut sealed).unwrap();
        for cut in [1, LEN, LEN + 5, RECORD_PLAIN + LEN + TAG, sealed.len() - 1] {
            let mut opener = cr.opener(NodeId(0));
            let (mut stream, mut plain) = (BytesMut::new(), BytesMut::new());
            stream.extend_from_slice(&sealed[..cut]);
            opener.open(&mut stream, &mut plain).unwrap();
            stream.extend_from_slice(&sealed[cut..]);
            opener.open(&mut stream, &mut plain).unwrap();
            assert_eq!(&plain[..], &data[..], "cut at {cut}");
        }
        let mut altered = sealed.clone();
        altered[LEN + 10] ^= 1;
        let mut plain = BytesMut::new();
        let err = cr
            .opener(NodeId(0))
            .open(&mut BytesMut::from(&altered[..]), &mut plain)
            .unwrap_err();
        assert!(
            err.to_string().contains("record 0 does not decrypt"),
            "{err}"
        );
        // The second record first: its number is not the one expected.
        let first = LEN + RECORD_PLAIN + TAG;
        let mut swapped = sealed[first..2 * first].to_vec();
        swapped.extend_from_slice(&sealed[..first]);
        let err = cr
            .opener(NodeId(0))
            .open(&mut BytesMut::from(&swapped[..]), &mut BytesMut::new())
            .unwrap_err();
        assert!(err.to_string().contains("out of order"), "{err}");
    }
}
