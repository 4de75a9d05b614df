//! Optional encryption of the data path (`--encrypt`): after a keyed handshake in which both
//! sides asked for it, every byte a connection carries (control and protocol frames alike)
//! travels in Noise transport messages made with that session's keys (AES-256-GCM), so a
//! peer on the path can neither read the data nor change a byte of it unnoticed.
//!
//! On the wire the stream is a sequence of **records**: a 2-byte big-endian length, then that
//! many bytes of ciphertext (at most 65535: up to [`RECORD_PLAIN`] bytes of plaintext and the
//! 16-byte tag). Each direction numbers its records from its first transport message on (the
//! dialer's handshake confirmation was its record 0), and that number is the AEAD nonce: a
//! record dropped, repeated, reordered or altered fails to decrypt, and the connection fails.
//!
//! The records are Noise transport messages (a test opens ours with snow's transport state and
//! the other way round), but sealed here with aws-lc-rs's AES-256-GCM directly on the session's
//! two keys (snow's raw split): snow's transport API encrypts from one buffer into another that
//! the caller must first zero, where aws-lc-rs seals and opens in place, so each side touches
//! every byte once less; and its AES-GCM (VAES/AVX-512 where the CPU has them) takes half the
//! CPU per byte of the ring snow itself uses for the handshake. The writer seals a frame just
//! before writing it, into a reused buffer, and the reader opens one record at a time into the
//! frame reader's reused buffers, so neither side page-faults fresh memory for every frame
//! (that, not the cipher, was most of the cost). The goodput example measures the remaining
//! cost against the cipher's own CPU; encryption stays off by default.

use crate::error::NetError;
use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use bytes::{Buf, BytesMut};
use std::sync::Arc;
use windrose_model::NodeId;

/// Largest plaintext of one record (a Noise message is at most 65535 bytes with its tag).
pub const RECORD_PLAIN: usize = 65535 - TAG;
const TAG: usize = 16;
const LEN: usize = 2;

/// Bytes `plain` bytes take as records (sealed whole, at most two calls of
/// [`Sealer::seal`] per frame: its head and its payload).
pub(crate) fn sealed_len(plain: usize) -> usize {
    plain + (plain / RECORD_PLAIN + 2) * (LEN + TAG)
}

/// Bytes of the whole records at the front of `sealed` (by their length fields alone: a
/// length shorter than a tag is for the opener to refuse).
#[cfg(test)]
pub(crate) fn whole_records(sealed: &[u8]) -> usize {
    let mut at = 0;
    while let Some(head) = sealed.get(at..at + LEN) {
        let end = at + LEN + u16::from_be_bytes([head[0], head[1]]) as usize;
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
    /// Appends `plain` to `out` as records.
    pub(crate) fn seal(&mut self, plain: &[u8], out: &mut BytesMut) -> Result<(), NetError> {
        for chunk in plain.chunks(RECORD_PLAIN) {
            out.extend_from_slice(&((chunk.len() + TAG) as u16).to_be_bytes());
            let at = out.len();
            out.extend_from_slice(chunk);
            let tag = self
                .cipher
                .send
                .seal_in_place_separate_tag(nonce(self.next), Aad::empty(), &mut out[at..])
                .map_err(|_| NetError::Failed("encrypting a record failed".into()))?;
            out.extend_from_slice(tag.as_ref());
            self.next += 1;
        }
        Ok(())
    }
}

/// Decrypts what one connection receives.
pub(crate) struct Opener {
    cipher: Arc<Cipher>,
    next: u64,
    peer: NodeId,
    records: u64,
}

impl Opener {
    /// The plaintext length of the record at the front of `sealed`, once it is complete
    /// (None: more bytes are needed); a length shorter than a tag fails the connection.
    pub(crate) fn front_len(&self, sealed: &[u8]) -> Result<Option<usize>, NetError> {
        if sealed.len() < LEN {
            return Ok(None);
        }
        let len = u16::from_be_bytes([sealed[0], sealed[1]]) as usize;
        if len < TAG {
            return Err(self.broken(format!("a record of {len} bytes, shorter than its tag")));
        }
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
        let len = u16::from_be_bytes([sealed[0], sealed[1]]) as usize;
        let record = &mut sealed[LEN..LEN + len];
        let opened = self
            .cipher
            .recv
            .open_in_place(nonce(self.next), Aad::empty(), record)
            .map_err(|_| {
                self.broken(format!(
                    "record {} does not decrypt with this session's keys (altered, replayed or out of order)",
                    self.records
                ))
            })?;
        plain.extend_from_slice(opened);
        sealed.advance(LEN + len);
        self.next += 1;
        self.records += 1;
        Ok(true)
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

    /// Our records are Noise transport messages: snow's transport state opens what we seal,
    /// with the record number as its nonce, and we open what it seals.
    #[test]
    fn records_are_noise_transport_messages_both_ways() {
        let (ci, cr, ti, tr) = session();
        let data = payload(3 * RECORD_PLAIN + 1000);
        let mut sealed = BytesMut::new();
        ci.sealer().seal(&data, &mut sealed).unwrap();
        let (mut at, mut nonce, mut got) = (0, 1u64, Vec::new());
        let mut buf = vec![0u8; RECORD_PLAIN];
        while at < sealed.len() {
            let len = u16::from_be_bytes([sealed[at], sealed[at + 1]]) as usize;
            let n = tr
                .read_message(nonce, &sealed[at + LEN..at + LEN + len], &mut buf)
                .unwrap();
            got.extend_from_slice(&buf[..n]);
            at += LEN + len;
            nonce += 1;
        }
        assert_eq!(got, data);
        assert_eq!(nonce, 5, "four records");

        // The responder's direction, sealed by snow from record 0, opened by our opener.
        let mut stream = BytesMut::new();
        let mut rec = vec![0u8; 65535];
        for (k, chunk) in data.chunks(RECORD_PLAIN).enumerate() {
            let n = tr.write_message(k as u64, chunk, &mut rec).unwrap();
            stream.extend_from_slice(&(n as u16).to_be_bytes());
            stream.extend_from_slice(&rec[..n]);
        }
        let mut plain = BytesMut::new();
        ci.opener(NodeId(1)).open(&mut stream, &mut plain).unwrap();
        assert_eq!(&plain[..], &data[..]);
        assert!(stream.is_empty());
        let _ = (cr, ti);
    }

    /// Records split anywhere across reads are opened once complete; an altered, replayed or
    /// reordered record fails the connection.
    #[test]
    fn partial_reads_wait_and_tampering_fails() {
        let (ci, cr, _, _) = session();
        let data = payload(2 * RECORD_PLAIN + 77);
        let mut sealed = BytesMut::new();
        ci.sealer().seal(&data, &mut sealed).unwrap();
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
