//! Authenticated group membership: a 32-byte **group key** shared by the members proves
//! membership in a mutual handshake ([`NoiseHandshake`]), and authenticates the root's job
//! ([`manifest_mac`]).
//!
//! # Why the Noise framework, through `snow`
//!
//! `snow` is the reference Rust implementation of the Noise Protocol Framework (the handshake
//! of WireGuard, Lightning and libp2p), maintained since 2017, and its `NNpsk0` pattern is
//! exactly the problem here: two parties who share a symmetric key and nothing else (no
//! certificates, no CA, no static key pairs to distribute) authenticate each other, both
//! ephemeral Diffie-Hellman keys make every handshake fresh so a recorded one cannot be
//! replayed, and the same session keys encrypt the data path in transport mode when asked
//! ([`crate::secure`]). rustls with a group CA would need a PKI per group and more code for
//! less; hand-rolling a MAC challenge-response would repeat what Noise already analyses.
//! Version 0.9 keeps the workspace's minimum Rust version (0.10 needs 1.85).
//!
//! Its primitives come from `ring` where it has them (snow's `ring-accelerated`: the AEAD in
//! assembly, AES-GCM on AES-NI/VAES), from RustCrypto otherwise (X25519, BLAKE2s). AES-GCM
//! rather than ChaCha20-Poly1305 because the data path's cost is the AEAD's: measured with the
//! goodput example on this machine, the encrypted path moved 636 MB/s with RustCrypto's
//! ChaCha20-Poly1305, 985 MB/s with ring's and 2100 MB/s with ring's AES-GCM (the clear path:
//! 4100 MB/s); cluster hosts have AES instructions.
//!
//! # The handshake
//!
//! `Noise_NNpsk0_25519_AESGCM_BLAKE2s` with the group key as the pre-shared key, three
//! messages, each in an **auth frame** (`0xA1`, kind, body length as u16 big-endian, body),
//! so a plain node and a keyed node recognise each other and say so:
//!
//! 1. dialer → acceptor: its claimed id and the id it expects (in the clear, bound into the
//!    handshake as the Noise prologue), then Noise `psk, e` carrying the [`Hello`] encrypted
//!    under the group key;
//! 2. acceptor → dialer: Noise `e, ee` carrying the [`Welcome`] (or the reason it refuses: group
//!    name, versions, node ids — the same checks as the plain handshake);
//! 3. dialer → acceptor: the first transport message, a confirmation encrypted with the keys
//!    of this session: only a dialer that holds the group key *and* the ephemeral key of
//!    message 1 can make it, so a recorded message 1 replayed later is refused here.
//!
//! A wrong key fails at message 1 (the acceptor refuses in the clear, both sides say
//! "authentication failed"), a replay at message 3, a plain node against a keyed one at the
//! first frame (either acceptor refuses in a form the other dialer understands).
//!
//! The data path after the handshake is in the clear (its pieces are checked against the
//! authenticated manifest, a broadcast's bytes by the root's final BLAKE3 check) unless the
//! members run with encryption ([`NoiseHandshake::with_encryption`], `--encrypt`): then every
//! later byte travels in this session's Noise transport messages ([`crate::secure`]). Both sides
//! say in messages 1 and 2 whether they encrypt, and a mismatch is refused with that reason.
//!
//! # The key
//!
//! 32 bytes, from a file (`--key-file`, or the path in `WINDROSE_GROUP_KEY_FILE`) holding the
//! raw bytes or 64 hex digits, or hex in `WINDROSE_GROUP_KEY` ([`load_group_key`]); never from a
//! command-line value, which every user of the machine can read in the process list. Like
//! ssh, a key file that its group or others may read or write is refused: there is no
//! exception, tests write their key files with mode 0600 too ([`GroupKey::write_new_file`]).

use crate::bootstrap::{
    hello_problem, read_control, welcome_problem, write_control, BoxFuture, Established, Handshake,
    Transport,
};
use crate::error::NetError;
use crate::group::Group;
use crate::wire::{Control, Hello, Role, Welcome, CONTROL_MAGIC};
use crate::PROTOCOL_VERSION;
use bytes::Buf;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use windrose_model::NodeId;
use windrose_proto::collective::CollectiveSpec;
use windrose_proto::frame::VERSION as WIRE_VERSION;

/// The Noise protocol of [`NoiseHandshake`].
pub const NOISE_PARAMS: &str = "Noise_NNpsk0_25519_AESGCM_BLAKE2s";
/// Environment variable holding the group key as 64 hex digits.
pub const KEY_ENV: &str = "WINDROSE_GROUP_KEY";
/// Environment variable holding the path of a group key file.
pub const KEY_FILE_ENV: &str = "WINDROSE_GROUP_KEY_FILE";
/// Bytes of a group key.
pub const KEY_LEN: usize = 32;
/// What a dialer whose handshake failed authentication reports.
pub const AUTH_FAILED: &str = "authentication failed: wrong group key or not a member";
/// The BLAKE3 `derive_key` context of the manifest key.
pub const MANIFEST_CONTEXT: &str = "windrose 2026 manifest";

/// First byte of an auth frame (high nibble 0xA, version 1).
pub const AUTH_MAGIC: u8 = 0xA1;
const KIND_NOISE: u8 = 1;
const KIND_REFUSAL: u8 = 2;
const AUTH_HEADER: usize = 4;
/// Largest Noise message (and so auth frame body).
const NOISE_MAX: usize = 65535;
const PROLOGUE: &[u8] = b"windrose auth 1";

/// A group key: 32 secret bytes every member holds. Its `Debug` never shows them.
#[derive(Clone, PartialEq, Eq)]
pub struct GroupKey([u8; KEY_LEN]);

impl fmt::Debug for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GroupKey(..)")
    }
}

impl GroupKey {
    /// The key of these bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> GroupKey {
        GroupKey(bytes)
    }

    /// A fresh random key from the operating system's generator.
    pub fn generate() -> GroupKey {
        use rand::RngCore;
        let mut k = [0u8; KEY_LEN];
        rand::rngs::OsRng.fill_bytes(&mut k);
        GroupKey(k)
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// The key as 64 lowercase hex digits (what key files and `WINDROSE_GROUP_KEY` hold).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The key from 64 hex digits (surrounding white space ignored).
    pub fn from_hex(s: &str) -> Result<GroupKey, String> {
        let s = s.trim();
        if s.len() != KEY_LEN * 2 {
            return Err(format!(
                "a group key is {} hex digits, this is {} characters",
                KEY_LEN * 2,
                s.len()
            ));
        }
        let mut k = [0u8; KEY_LEN];
        for (i, pair) in s.as_bytes().chunks_exact(2).enumerate() {
            let digits = std::str::from_utf8(pair).unwrap_or("?");
            k[i] = u8::from_str_radix(digits, 16)
                .map_err(|_| format!("{digits:?} at character {} is not hex", 2 * i + 1))?;
        }
        Ok(GroupKey(k))
    }

    /// The key from a key file's contents: 32 raw bytes, or 64 hex digits.
    pub fn from_file_contents(bytes: &[u8]) -> Result<GroupKey, String> {
        if let Ok(k) = <[u8; KEY_LEN]>::try_from(bytes) {
            if !bytes.iter().all(|b| b.is_ascii_hexdigit()) {
                return Ok(GroupKey(k));
            }
        }
        let text = std::str::from_utf8(bytes).map_err(|_| {
            format!(
                "{} bytes: a key file holds {KEY_LEN} raw bytes or {} hex digits",
                bytes.len(),
                KEY_LEN * 2
            )
        })?;
        GroupKey::from_hex(text)
    }

    /// Reads a key file, refusing one that group or others may read or write (like ssh).
    pub fn load_file(path: &Path) -> Result<GroupKey, NetError> {
        let bad =
            |what: String| NetError::Group(format!("group key file {}: {what}", path.display()));
        let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(bad(format!(
                    "permissions {mode:04o} are too open: the group key must not be accessible \
                     to group or others (run `chmod 600 {}`)",
                    path.display()
                )));
            }
        }
        if !meta.is_file() {
            return Err(bad("not a regular file".into()));
        }
        let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        GroupKey::from_file_contents(&bytes).map_err(bad)
    }

    /// Writes the key as hex to a new file `path` with mode 0600 (it must not exist yet).
    pub fn write_new_file(&self, path: &Path) -> Result<(), NetError> {
        use std::io::Write;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let io = |source| NetError::Io {
            what: format!("writing the group key file {}", path.display()),
            source,
        };
        let mut f = opts.open(path).map_err(io)?;
        f.write_all(format!("{}\n", self.to_hex()).as_bytes())
            .map_err(io)?;
        f.sync_all().map_err(io)
    }

    /// The key that MACs the root's manifest: BLAKE3 `derive_key` with [`MANIFEST_CONTEXT`].
    pub fn manifest_key(&self) -> [u8; 32] {
        blake3::derive_key(MANIFEST_CONTEXT, &self.0)
    }
}

/// Where a group key came from (for messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// `--key-file`.
    File(PathBuf),
    /// The file named by `WINDROSE_GROUP_KEY_FILE`.
    EnvFile(PathBuf),
    /// `WINDROSE_GROUP_KEY`.
    Env,
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::File(p) => write!(f, "--key-file {}", p.display()),
            KeySource::EnvFile(p) => write!(f, "{KEY_FILE_ENV}={}", p.display()),
            KeySource::Env => write!(f, "{KEY_ENV}"),
        }
    }
}

/// The group key of this process: `key_file` (the `--key-file` option) if given, else the file
/// named by `WINDROSE_GROUP_KEY_FILE`, else the hex in `WINDROSE_GROUP_KEY`; None when there is
/// none (the group is then unauthenticated).
pub fn load_group_key(key_file: Option<&Path>) -> Result<Option<(GroupKey, KeySource)>, NetError> {
    load_group_key_with(key_file, |name| std::env::var(name).ok())
}

/// [`load_group_key`] with the environment given as a lookup (tests).
pub fn load_group_key_with(
    key_file: Option<&Path>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<(GroupKey, KeySource)>, NetError> {
    if let Some(p) = key_file {
        return Ok(Some((GroupKey::load_file(p)?, KeySource::File(p.into()))));
    }
    if let Some(p) = env(KEY_FILE_ENV).filter(|s| !s.is_empty()) {
        let p = PathBuf::from(p);
        return Ok(Some((GroupKey::load_file(&p)?, KeySource::EnvFile(p))));
    }
    if let Some(hex) = env(KEY_ENV).filter(|s| !s.is_empty()) {
        let k = GroupKey::from_hex(&hex).map_err(|e| NetError::Group(format!("{KEY_ENV}: {e}")))?;
        return Ok(Some((k, KeySource::Env)));
    }
    Ok(None)
}

/// The MAC of a multicast manifest (piece length, total length, every piece's hash as hex):
/// BLAKE3 keyed with `manifest_key` ([`GroupKey::manifest_key`]), as 64 hex digits.
pub fn manifest_mac(
    manifest_key: &[u8; 32],
    total_len: u64,
    piece_len: u32,
    hashes_hex: &str,
) -> String {
    let mut h = blake3::Hasher::new_keyed(manifest_key);
    h.update(b"windrose manifest 1");
    h.update(&total_len.to_be_bytes());
    h.update(&piece_len.to_be_bytes());
    h.update(hashes_hex.as_bytes());
    h.finalize().to_hex().to_string()
}

/// Whether `mac` (hex) is [`manifest_mac`] of this manifest, compared in constant time.
pub fn verify_manifest_mac(
    manifest_key: &[u8; 32],
    total_len: u64,
    piece_len: u32,
    hashes_hex: &str,
    mac: &str,
) -> bool {
    let expected = manifest_mac(manifest_key, total_len, piece_len, hashes_hex);
    match (
        blake3::Hash::from_hex(mac),
        blake3::Hash::from_hex(expected),
    ) {
        (Ok(got), Ok(want)) => got == want,
        _ => false,
    }
}

/// The MAC of a whole announcement (`announcement`: the bytes the Host MACs, see
/// [`AnnounceAuth::announce_mac`](windrose_proto::host::AnnounceAuth::announce_mac)): BLAKE3
/// keyed with `manifest_key`, as [`manifest_mac`], over its own domain tag and then the bytes,
/// as 64 hex digits. The tags ("windrose announcement 1", "windrose manifest 1") differ from
/// their tenth byte, so no manifest's MAC is an announcement's and no announcement's a
/// manifest's.
pub fn announcement_mac(manifest_key: &[u8; 32], announcement: &[u8]) -> String {
    let mut h = blake3::Hasher::new_keyed(manifest_key);
    h.update(b"windrose announcement 1");
    h.update(announcement);
    h.finalize().to_hex().to_string()
}

/// A keyed group's proof that a collective comes from a member: the initiator's Host puts
/// [`manifest_mac`] in every manifest it announces and [`announcement_mac`] in every
/// announcement, and each member's Host checks both before it builds its machine, so an
/// announcement altered on its way (the root's own copy, or a copy a tree parent relays,
/// [`HostConfig::relay_announce`](windrose_proto::host::HostConfig::relay_announce)), or made
/// without the key, is refused even where the connections are authenticated (the data path
/// after the handshake is in the clear unless the group encrypts). What the data then carries
/// is checked end to end: pieces against the manifest, a broadcast's bytes by the initiator's
/// digests.
#[derive(Clone)]
pub struct ManifestMac {
    key: [u8; 32],
}

impl ManifestMac {
    /// With the manifest key of a group key ([`GroupKey::manifest_key`]).
    pub fn new(manifest_key: [u8; 32]) -> ManifestMac {
        ManifestMac { key: manifest_key }
    }
}

impl fmt::Debug for ManifestMac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ManifestMac(..)")
    }
}

impl windrose_proto::host::AnnounceAuth for ManifestMac {
    fn seal(&self, spec: &mut CollectiveSpec, total_len: u64) {
        if let Some(manifest) = spec.manifest_mut() {
            if manifest.mac.is_none() {
                manifest.mac = Some(manifest_mac(
                    &self.key,
                    total_len,
                    manifest.piece_len,
                    &manifest.hashes,
                ));
            }
        }
    }

    fn check(&self, spec: &CollectiveSpec, total_len: u64) -> Option<String> {
        let manifest = spec.manifest()?;
        match &manifest.mac {
            None => Some(
                "the collective's manifest carries no MAC and this group has a key: refused \
                 (the initiator runs without the group key, or an older build)"
                    .into(),
            ),
            Some(mac)
                if !verify_manifest_mac(
                    &self.key,
                    total_len,
                    manifest.piece_len,
                    &manifest.hashes,
                    mac,
                ) =>
            {
                Some(
                    "the manifest's MAC does not match: its hashes or lengths were \
                     altered, or it was made with another group key; refused"
                        .into(),
                )
            }
            Some(_) => None,
        }
    }

    fn announce_mac(&self, announcement: &[u8]) -> Option<String> {
        Some(announcement_mac(&self.key, announcement))
    }
}

/// The handshake that proves knowledge of the group key, both ways (see the
/// [module docs](self)).
#[derive(Clone, Debug)]
pub struct NoiseHandshake {
    key: GroupKey,
    encrypt: bool,
}

impl NoiseHandshake {
    /// The handshake of members holding `key` (data path in the clear).
    pub fn new(key: GroupKey) -> NoiseHandshake {
        NoiseHandshake {
            key,
            encrypt: false,
        }
    }

    /// The same, encrypting the data path of every connection when `on` (every member of the
    /// group must choose alike).
    pub fn with_encryption(mut self, on: bool) -> NoiseHandshake {
        self.encrypt = on;
        self
    }

    /// Whether it encrypts the data path.
    pub fn encrypts(&self) -> bool {
        self.encrypt
    }

    /// Why a peer that does (`theirs`) or does not encrypt cannot talk to this one, if so.
    fn encryption_mismatch(&self, theirs: bool, me: NodeId, them: NodeId) -> Option<String> {
        let says = |on: bool| {
            if on {
                "with --encrypt"
            } else {
                "without --encrypt"
            }
        };
        (theirs != self.encrypt).then(|| {
            format!(
                "data-path encryption differs: node {them} runs {}, node {me} {}; every member must choose alike",
                says(theirs),
                says(self.encrypt)
            )
        })
    }

    fn builder_state(
        &self,
        from: NodeId,
        to: NodeId,
        initiator: bool,
    ) -> Result<snow::HandshakeState, snow::Error> {
        let params: snow::params::NoiseParams = NOISE_PARAMS.parse()?;
        let mut prologue = PROLOGUE.to_vec();
        prologue.extend_from_slice(&from.0.to_be_bytes());
        prologue.extend_from_slice(&to.0.to_be_bytes());
        // ring's AEAD (see the module docs), RustCrypto for what ring lacks.
        let resolver = snow::resolvers::FallbackResolver::new(
            Box::new(snow::resolvers::RingResolver),
            Box::new(snow::resolvers::DefaultResolver),
        );
        let b = snow::Builder::with_resolver(params, Box::new(resolver))
            .psk(0, self.key.as_bytes())
            .prologue(&prologue);
        if initiator {
            b.build_initiator()
        } else {
            b.build_responder()
        }
    }
}

/// What travels encrypted inside the Noise messages.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Sealed {
    Hello(Greeting<Hello>),
    Welcome(Greeting<Welcome>),
    Reject(String),
    Confirm,
}

/// A hello or welcome and whether its sender encrypts the data path (absent: it does not).
#[derive(Serialize, Deserialize)]
struct Greeting<T> {
    #[serde(flatten)]
    inner: T,
    #[serde(default)]
    encrypt: bool,
}

/// One frame read during an authenticated handshake.
enum Incoming {
    /// A Noise message (for message 1: with the 8 bytes of claimed ids in front).
    Noise(Vec<u8>),
    /// A refusal in the clear (the peer could not authenticate us).
    Refusal(String),
    /// A plain handshake's control frame (a node without a key).
    Plain(Control),
}

fn hs_err(who: &str, reason: impl Into<String>) -> NetError {
    NetError::Handshake {
        who: who.to_string(),
        reason: reason.into(),
    }
}

/// Why a handshake read failed when the peer hung up.
const CLOSED_DURING_HANDSHAKE: &str = "the connection closed during the handshake";

/// Reads until `need` bytes are buffered.
async fn fill(io: &mut Transport, need: usize, who: &str) -> Result<(), NetError> {
    while io.reader.buffered_len() < need {
        let n = io
            .stream
            .read_buf(io.reader.buffer_mut())
            .await
            .map_err(|e| match e.kind() {
                // A peer that drops the connection with bytes unread resets it.
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted => {
                    hs_err(who, CLOSED_DURING_HANDSHAKE)
                }
                _ => hs_err(who, format!("read failed: {e}")),
            })?;
        if n == 0 {
            return Err(hs_err(who, CLOSED_DURING_HANDSHAKE));
        }
    }
    Ok(())
}

async fn read_incoming(io: &mut Transport, who: &str) -> Result<Incoming, NetError> {
    fill(io, 1, who).await?;
    let first = io.reader.buffer_mut()[0];
    if first == AUTH_MAGIC {
        fill(io, AUTH_HEADER, who).await?;
        let head = &io.reader.buffer_mut()[..AUTH_HEADER];
        let kind = head[1];
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        fill(io, AUTH_HEADER + len, who).await?;
        let buf = io.reader.buffer_mut();
        buf.advance(AUTH_HEADER);
        let body = buf.split_to(len).to_vec();
        match kind {
            KIND_NOISE => Ok(Incoming::Noise(body)),
            KIND_REFUSAL => Ok(Incoming::Refusal(
                String::from_utf8_lossy(&body).into_owned(),
            )),
            k => Err(hs_err(
                who,
                format!("sent an auth frame of unknown kind {k}"),
            )),
        }
    } else if first & 0xF0 == CONTROL_MAGIC {
        Ok(Incoming::Plain(read_control(io, who).await?))
    } else {
        Err(hs_err(
            who,
            format!("sent byte 0x{first:02x} where a handshake frame was expected (not a windrose node?)"),
        ))
    }
}

async fn write_auth(io: &mut Transport, kind: u8, body: &[u8], who: &str) -> Result<(), NetError> {
    let len = u16::try_from(body.len()).map_err(|_| hs_err(who, "handshake message too large"))?;
    let mut frame = Vec::with_capacity(AUTH_HEADER + body.len());
    frame.extend_from_slice(&[AUTH_MAGIC, kind]);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(body);
    io.stream
        .write_all(&frame)
        .await
        .map_err(|e| hs_err(who, format!("write failed: {e}")))
}

/// For the plain handshake's acceptor: a dialer that opens with an auth frame holds a group
/// key this node lacks. Refuses it in a form it understands (so it reports the reason too) and
/// says why; Ok when the dialer speaks the plain handshake.
pub(crate) async fn refuse_if_keyed(
    io: &mut Transport,
    me: NodeId,
    remote: SocketAddr,
) -> Result<(), NetError> {
    let anonymous = format!("a connection from {remote}");
    fill(io, 1, &anonymous).await?;
    if io.reader.buffer_mut()[0] != AUTH_MAGIC {
        return Ok(());
    }
    let refusal = format!("node {me} has no group key (it runs unauthenticated)");
    let _ = write_auth(io, KIND_REFUSAL, refusal.as_bytes(), &anonymous).await;
    Err(hs_err(
        &anonymous,
        format!(
            "authentication mismatch: the dialer holds a group key but node {me} has none: give \
             every member the same --key-file or {KEY_ENV}"
        ),
    ))
}

fn seal(sealed: &Sealed) -> Vec<u8> {
    serde_json::to_vec(sealed).expect("handshake messages serialise")
}

fn unseal(bytes: &[u8], who: &str) -> Result<Sealed, NetError> {
    serde_json::from_slice(bytes)
        .map_err(|e| hs_err(who, format!("sent a malformed handshake message: {e}")))
}

/// Encrypts `msg` as a transport message and sends it.
/// Sends the dialer's one transport message of the handshake (number 0 of its direction).
async fn send_transport(
    io: &mut Transport,
    t: &snow::StatelessTransportState,
    msg: &Sealed,
    who: &str,
) -> Result<(), NetError> {
    let mut buf = vec![0u8; NOISE_MAX];
    let n = t
        .write_message(0, &seal(msg), &mut buf)
        .map_err(|e| hs_err(who, format!("noise: {e}")))?;
    write_auth(io, KIND_NOISE, &buf[..n], who).await
}

impl Handshake for NoiseHandshake {
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
            let failed = |detail: String| hs_err(&who, format!("{AUTH_FAILED} ({detail})"));
            let noise = |e: snow::Error| hs_err(&who, format!("noise: {e}"));
            let mut hs = self.builder_state(me, peer, true).map_err(noise)?;
            let hello = Sealed::Hello(Greeting {
                inner: Hello {
                    group: group.name().to_string(),
                    protocol_version: PROTOCOL_VERSION,
                    wire_version: WIRE_VERSION,
                    from: me,
                    to: peer,
                    role,
                    group_digest: group.digest(),
                },
                encrypt: self.encrypt,
            });
            let mut buf = vec![0u8; NOISE_MAX];
            let n = hs.write_message(&seal(&hello), &mut buf).map_err(noise)?;
            let mut body = Vec::with_capacity(8 + n);
            body.extend_from_slice(&me.0.to_be_bytes());
            body.extend_from_slice(&peer.0.to_be_bytes());
            body.extend_from_slice(&buf[..n]);
            let sent = Instant::now();
            write_auth(io, KIND_NOISE, &body, &who).await?;
            let msg = match read_incoming(io, &who).await {
                Ok(Incoming::Noise(m)) => m,
                Ok(Incoming::Refusal(r)) => return Err(failed(format!("it refused us: {r}"))),
                Ok(Incoming::Plain(Control::Reject(r))) => {
                    return Err(failed(format!("it answered in the clear: {r}")))
                }
                Ok(Incoming::Plain(c)) => {
                    return Err(failed(format!(
                        "it answered with a plain {} frame: it runs without a group key",
                        c.name()
                    )))
                }
                Err(NetError::Handshake { reason, .. }) => {
                    return Err(failed(format!(
                        "{reason}; a node without a key or with another key does that"
                    )))
                }
                Err(e) => return Err(e),
            };
            let mut out = vec![0u8; NOISE_MAX];
            let n = hs
                .read_message(&msg, &mut out)
                .map_err(|_| failed("its answer does not decrypt with this group key".into()))?;
            let rtt = sent.elapsed();
            let answer = unseal(&out[..n], &who)?;
            // The dialer's record 0 is the confirmation below.
            let cipher = match self.encrypt {
                true => Some(crate::secure::Cipher::new(&mut hs, 1, 0)?),
                false => None,
            };
            let t = hs.into_stateless_transport_mode().map_err(noise)?;
            let w = match answer {
                Sealed::Welcome(w) => w,
                Sealed::Reject(r) => return Err(hs_err(&who, format!("it rejected us: {r}"))),
                _ => return Err(hs_err(&who, "expected a welcome in its handshake answer")),
            };
            let problem = welcome_problem(group, peer, &w.inner)
                .or_else(|| self.encryption_mismatch(w.encrypt, me, peer));
            if let Some(reason) = problem {
                let _ = send_transport(io, &t, &Sealed::Reject(reason.clone()), &who).await;
                return Err(hs_err(&who, format!("rejected it: {reason}")));
            }
            send_transport(io, &t, &Sealed::Confirm, &who).await?;
            Ok(Established {
                peer,
                role,
                rtt: Some(rtt),
                cipher,
            })
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
            let anonymous = format!("a connection from {remote}");
            let body = match read_incoming(io, &anonymous).await? {
                Incoming::Noise(b) if b.len() > 8 => b,
                Incoming::Noise(_) => return Err(hs_err(&anonymous, "sent a truncated handshake")),
                Incoming::Plain(Control::Hello(h)) => {
                    let reason = format!(
                        "this group requires the group key and node {me} holds it; the dialer \
                         (node {}) has none: give it --key-file or {KEY_ENV}",
                        h.from
                    );
                    let _ = write_control(io, &Control::Reject(reason), &anonymous).await;
                    return Err(hs_err(
                        &format!("an unauthenticated dialer claiming to be node {} from {remote}", h.from),
                        "authentication failed: it sent a plain handshake without the group key; refused",
                    ));
                }
                Incoming::Plain(c) => {
                    return Err(hs_err(
                        &anonymous,
                        format!("expected a handshake, got a {} frame", c.name()),
                    ))
                }
                Incoming::Refusal(r) => {
                    return Err(hs_err(&anonymous, format!("it refused us: {r}")))
                }
            };
            let from = NodeId(u32::from_be_bytes(body[0..4].try_into().expect("4 bytes")));
            let to = NodeId(u32::from_be_bytes(body[4..8].try_into().expect("4 bytes")));
            let claimed = format!("a dialer claiming to be node {from} from {remote}");
            let noise = |e: snow::Error| hs_err(&claimed, format!("noise: {e}"));
            let mut hs = self.builder_state(from, to, false).map_err(noise)?;
            let mut out = vec![0u8; NOISE_MAX];
            let n = match hs.read_message(&body[8..], &mut out) {
                Ok(n) => n,
                Err(_) => {
                    let refusal =
                        format!("your handshake does not decrypt with node {me}'s group key");
                    let _ = write_auth(io, KIND_REFUSAL, refusal.as_bytes(), &claimed).await;
                    return Err(hs_err(
                        &claimed,
                        "authentication failed: its handshake does not decrypt with this group's \
                         key (wrong group key or not a member); refused",
                    ));
                }
            };
            let (hello, their_encrypt) = match unseal(&out[..n], &claimed)? {
                Sealed::Hello(h) if h.inner.from == from && h.inner.to == to => {
                    (h.inner, h.encrypt)
                }
                _ => {
                    return Err(hs_err(
                        &claimed,
                        "expected a hello in its first handshake message",
                    ))
                }
            };
            let who = format!("node {} (from {remote})", hello.from);
            let problem = hello_problem(group, me, &hello)
                .or_else(|| self.encryption_mismatch(their_encrypt, me, hello.from));
            let answer = match &problem {
                Some(reason) => Sealed::Reject(reason.clone()),
                None => Sealed::Welcome(Greeting {
                    inner: Welcome {
                        group: group.name().to_string(),
                        protocol_version: PROTOCOL_VERSION,
                        wire_version: WIRE_VERSION,
                        node: me,
                        group_digest: group.digest(),
                    },
                    encrypt: self.encrypt,
                }),
            };
            let mut buf = vec![0u8; NOISE_MAX];
            let n = hs.write_message(&seal(&answer), &mut buf).map_err(noise)?;
            write_auth(io, KIND_NOISE, &buf[..n], &who).await?;
            if let Some(reason) = problem {
                return Err(hs_err(&who, format!("rejected it: {reason}")));
            }
            // The dialer's record 0 was its confirmation, read next.
            let cipher = match self.encrypt {
                true => Some(crate::secure::Cipher::new(&mut hs, 0, 1)?),
                false => None,
            };
            let t = hs.into_stateless_transport_mode().map_err(noise)?;
            let replay = |detail: String| {
                hs_err(
                    &who,
                    format!(
                        "authentication failed: {detail} (a replayed or forged handshake); refused"
                    ),
                )
            };
            let msg = match read_incoming(io, &who).await {
                Ok(Incoming::Noise(m)) => m,
                Ok(_) => return Err(replay("it did not confirm the handshake".into())),
                // Most often a dialer whose own deadline passed first: hundreds of handshakes
                // at once on a loaded machine take longer than one. Not only a replay.
                Err(NetError::Handshake { reason, .. }) if reason == CLOSED_DURING_HANDSHAKE => {
                    return Err(hs_err(
                        &who,
                        "the dialer closed the connection without confirming the handshake: it \
                         gave up waiting for this node's answer (its handshake deadline passed: \
                         a loaded machine?), or it replayed a recorded first message; refused",
                    ))
                }
                Err(NetError::Handshake { reason, .. }) => {
                    return Err(replay(format!(
                        "it did not confirm the handshake: {reason}"
                    )))
                }
                Err(e) => return Err(e),
            };
            let n = t.read_message(0, &msg, &mut out).map_err(|_| {
                replay("its confirmation does not decrypt with this session's keys".into())
            })?;
            match unseal(&out[..n], &who)? {
                Sealed::Confirm => Ok(Established {
                    peer: hello.from,
                    role: hello.role,
                    rtt: None,
                    cipher,
                }),
                Sealed::Reject(r) => Err(hs_err(&who, format!("it rejected us: {r}"))),
                _ => Err(hs_err(&who, "expected a confirmation")),
            }
        })
    }

    fn manifest_key(&self) -> Option<[u8; 32]> {
        Some(self.key.manifest_key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use windrose_proto::collective::ManifestSpec;
    use windrose_proto::host::AnnounceAuth;
    use windrose_proto::mob::MobConfig;
    use windrose_proto::multicast::MulticastProtocol;
    use windrose_proto::pieces::Manifest;

    #[test]
    fn an_announced_manifest_is_sealed_once_and_checked() {
        let data = vec![3u8; 10_000];
        let spec = |mac: Option<String>| CollectiveSpec::Multicast {
            protocol: MulticastProtocol::Mob,
            params: windrose_proto::collective::MulticastParams::Mob(MobConfig::default()),
            manifest: ManifestSpec {
                mac,
                ..ManifestSpec::of(&Manifest::build(&data, 4096).unwrap())
            },
        };
        let ours = ManifestMac::new(GroupKey::from_bytes([1; 32]).manifest_key());
        let theirs = ManifestMac::new(GroupKey::from_bytes([2; 32]).manifest_key());
        let mut sealed = spec(None);
        ours.seal(&mut sealed, 10_000);
        assert_eq!(ours.check(&sealed, 10_000), None);
        // Sealing again keeps the proof it has.
        let mut again = sealed.clone();
        theirs.seal(&mut again, 10_000);
        assert_eq!(again, sealed);
        // Another key, another length, altered hashes, no MAC: refused.
        assert!(theirs
            .check(&sealed, 10_000)
            .unwrap()
            .contains("MAC does not match"));
        assert!(ours
            .check(&sealed, 10_001)
            .unwrap()
            .contains("MAC does not match"));
        let CollectiveSpec::Multicast { manifest, .. } = &mut again else {
            unreachable!()
        };
        manifest.hashes.replace_range(0..1, "f");
        assert!(ours
            .check(&again, 10_000)
            .unwrap()
            .contains("MAC does not match"));
        assert!(ours
            .check(&spec(None), 10_000)
            .unwrap()
            .contains("carries no MAC"));
        // Nothing to prove for a collective without a manifest.
        let bcast = CollectiveSpec::Broadcast {
            tree: windrose_proto::collective::TreeSpec {
                node_count: 1,
                root: NodeId(0),
                edges: Vec::new(),
            },
            segment_bytes: 1024,
            max_frame_payload: 1024,
        };
        assert_eq!(ours.check(&bcast, 5), None);
    }

    #[test]
    fn a_keyed_group_macs_whole_announcements() {
        let a = GroupKey::from_bytes([1; 32]).manifest_key();
        let b = GroupKey::from_bytes([2; 32]).manifest_key();
        let ours = ManifestMac::new(a);
        let bytes = br#"{"t":"announce","transfer":4}"#;
        let mac = ours.announce_mac(bytes).unwrap();
        assert_eq!(mac, announcement_mac(&a, bytes));
        assert_eq!(mac.len(), 64);
        assert_ne!(mac, announcement_mac(&b, bytes));
        assert_ne!(
            mac,
            announcement_mac(&a, br#"{"t":"announce","transfer":5}"#)
        );
        // Its own domain: not the keyed hash of the bytes alone, nor a manifest's MAC.
        assert_ne!(mac, blake3::keyed_hash(&a, bytes).to_hex().to_string());
        let manifest = manifest_mac(&a, 0, 0, "");
        assert_ne!(announcement_mac(&a, b""), manifest);
    }

    #[test]
    fn hex_round_trip_and_errors() {
        let k = GroupKey::from_bytes([7; 32]);
        assert_eq!(GroupKey::from_hex(&k.to_hex()).unwrap(), k);
        assert!(GroupKey::from_hex("abc")
            .unwrap_err()
            .contains("64 hex digits"));
        assert!(GroupKey::from_hex(&"zz".repeat(32))
            .unwrap_err()
            .contains("not hex"));
        assert_eq!(format!("{k:?}"), "GroupKey(..)");
    }

    #[test]
    fn file_contents_raw_or_hex() {
        let k = GroupKey::from_bytes([0xAB; 32]);
        assert_eq!(GroupKey::from_file_contents(&[0xAB; 32]).unwrap(), k);
        let hex = format!("{}\n", k.to_hex());
        assert_eq!(GroupKey::from_file_contents(hex.as_bytes()).unwrap(), k);
        assert!(GroupKey::from_file_contents(b"short").is_err());
    }

    #[test]
    fn manifest_mac_depends_on_key_and_content() {
        let a = GroupKey::from_bytes([1; 32]).manifest_key();
        let b = GroupKey::from_bytes([2; 32]).manifest_key();
        let m = manifest_mac(&a, 10, 4, "00ff");
        assert_eq!(m, manifest_mac(&a, 10, 4, "00ff"));
        assert_ne!(m, manifest_mac(&b, 10, 4, "00ff"));
        assert_ne!(m, manifest_mac(&a, 11, 4, "00ff"));
        assert_ne!(m, manifest_mac(&a, 10, 4, "00fe"));
        assert!(verify_manifest_mac(&a, 10, 4, "00ff", &m));
        assert!(!verify_manifest_mac(&b, 10, 4, "00ff", &m));
        assert!(!verify_manifest_mac(&a, 10, 4, "00ff", "not hex"));
    }
}
