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
//! Encryption costs copies the plain path avoids (the payloads are no longer sent straight from
//! the root's buffer), hence off by default; the README gives the measured cost.

use crate::error::NetError;
use bytes::{Buf, BufMut, BytesMut};
use std::sync::Arc;
use windrose_model::NodeId;

/// Largest plaintext of one record (a Noise message is at most 65535 bytes with its tag).
pub const RECORD_PLAIN: usize = 65535 - TAG;
const TAG: usize = 16;
const LEN: usize = 2;

/// The keys of one encrypted connection and where each direction's record numbers start.
pub struct Cipher {
    state: snow::StatelessTransportState,
    first_send: u64,
    first_recv: u64,
}

impl Cipher {
    /// The keys of a finished handshake; `first_send` and `first_recv` are the numbers of the
    /// first data records each way (after the handshake's own transport messages).
    pub(crate) fn new(
        state: snow::StatelessTransportState,
        first_send: u64,
        first_recv: u64,
    ) -> Arc<Cipher> {
        Arc::new(Cipher {
            state,
            first_send,
            first_recv,
        })
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
    pub(crate) fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), NetError> {
        for chunk in plain.chunks(RECORD_PLAIN) {
            let at = out.len();
            out.resize(at + LEN + chunk.len() + TAG, 0);
            let n = self
                .cipher
                .state
                .write_message(self.next, chunk, &mut out[at + LEN..])
                .map_err(|e| NetError::Failed(format!("encrypting a record: {e}")))?;
            out[at..at + LEN].copy_from_slice(&(n as u16).to_be_bytes());
            out.truncate(at + LEN + n);
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
    /// Decrypts every complete record at the front of `sealed` (removing it) and appends the
    /// plaintext to `plain`; a record that does not decrypt fails the connection.
    pub(crate) fn open(
        &mut self,
        sealed: &mut BytesMut,
        plain: &mut BytesMut,
    ) -> Result<(), NetError> {
        while sealed.len() >= LEN {
            let len = u16::from_be_bytes([sealed[0], sealed[1]]) as usize;
            if len < TAG {
                return Err(self.broken(format!("a record of {len} bytes, shorter than its tag")));
            }
            if sealed.len() < LEN + len {
                break;
            }
            plain.reserve(len - TAG);
            let at = plain.len();
            // Room for the plaintext, written over these zeros.
            plain.put_bytes(0, len - TAG);
            let n = self
                .cipher
                .state
                .read_message(self.next, &sealed[LEN..LEN + len], &mut plain[at..])
                .map_err(|_| {
                    self.broken(format!(
                        "record {} does not decrypt with this session's keys (altered, replayed or out of order)",
                        self.records
                    ))
                })?;
            plain.truncate(at + n);
            sealed.advance(LEN + len);
            self.next += 1;
            self.records += 1;
        }
        Ok(())
    }

    fn broken(&self, what: String) -> NetError {
        NetError::PeerMisbehaved {
            peer: self.peer,
            what: format!("sent an encrypted stream that fails its check: {what}"),
        }
    }
}
