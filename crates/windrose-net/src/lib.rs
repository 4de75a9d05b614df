//! The real driver of windrose: the protocol machines of `windrose-proto`, unchanged, run as
//! tokio tasks talking TCP.
//!
//! - [`group`]: group files (name, protocol version, node id → address and cluster);
//!   [`bootstrap`]: where membership comes from ([`bootstrap::Bootstrap`]) and how a connection
//!   is verified ([`bootstrap::Handshake`]) — both traits, so authentication and launchers such
//!   as mpirun can be added without touching the driver; [`auth`]: the group key and the
//!   handshake that proves it (Noise, through `snow`).
//! - [`wire`]: what a connection carries: proto frames (the Host's session among them), plus this
//!   crate's control frames for the handshake that opens a connection and a refusal that closes
//!   it.
//! - [`host_driver`]: the thin driver of a long-lived group member: one `windrose_proto`
//!   `Host` per process over TCP (transport, timers, application I/O; the session is the
//!   host's). [`serve_group`](host_driver::serve_group) runs a member until it leaves; its
//!   handle also gives the member's link measurements and watches a root's source file, and
//!   [`piece_file::FileShelf`] keeps a multicast's pieces across a member's restart. Every
//!   command runs its members on it (the one-shot driver and its session are gone).
//! - [`outcome`]: a run as its root saw it ([`RunOutcome`], built from the members' end
//!   reports to the root's host), what root commands print.
//! - [`measure`]: round-trip and throughput series per link; [`trees`]: the trees a run can use
//!   (including the `chain`); [`sink`]: where received data goes (memory or a file renamed
//!   into place when complete).
//!
//! There is no protocol logic here: the driver only moves frames, time, data and failures
//! between the machines and the network.
//!
//! # Example: a broadcast in a three-member group on loopback, in one process
//!
//! Each member is a [`serve_group`](host_driver::serve_group) task driving its own `Host`;
//! any member starts a collective through its [`GroupHandle`](host_driver::GroupHandle) and
//! hears it complete there.
//!
//! ```
//! use std::sync::Arc;
//! use windrose_model::{ClusterId, NodeId};
//! use windrose_net::bootstrap::Membership;
//! use windrose_net::group::{Group, Member};
//! use windrose_net::host_driver::{group_channel, serve_group, GroupConfig, GroupEvent};
//! use windrose_net::trees::group_tree;
//! use windrose_proto::collective::{CollectiveSpec, TreeSpec};
//! use windrose_proto::host::AppRequest;
//! use windrose_proto::Report;
//! use windrose_trees::TreeAlgorithm;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! // Listen first (port 0: the OS picks), then write the group with the real addresses.
//! let mut listeners = Vec::new();
//! let mut members = Vec::new();
//! for i in 0..3u32 {
//!     let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//!     let addr = l.local_addr().unwrap().to_string();
//!     members.push(Member { id: NodeId(i), addr, cluster: ClusterId(0) });
//!     listeners.push(l);
//! }
//! let group = Arc::new(Group::new("example", members).unwrap());
//! let mut handles = Vec::new();
//! for (i, l) in (0..3u32).zip(listeners) {
//!     let config = GroupConfig::new(Membership { group: group.clone(), me: NodeId(i) });
//!     let (handle, ports) = group_channel();
//!     tokio::spawn(serve_group(l, config, ports));
//!     handles.push(handle);
//! }
//! // Member 2 broadcasts down a chain rooted at itself.
//! let tree = group_tree(TreeAlgorithm::Chain, &group, NodeId(2)).unwrap();
//! let spec = CollectiveSpec::Broadcast { tree: TreeSpec::of(&tree), segment_bytes: 8, max_frame_payload: 8 };
//! let data = bytes::Bytes::from_static(b"the same bytes at every member");
//! handles[2].request(AppRequest::StartCollective { spec, data: data.clone(), transfer: None });
//! // Member 0 gets the bytes in order; member 2 hears every member finish.
//! let mut got = Vec::new();
//! while got.len() < data.len() {
//!     if let Some(GroupEvent::Delivered { data, .. }) = handles[0].events.recv().await {
//!         got.extend_from_slice(&data);
//!     }
//! }
//! assert_eq!(got, data.to_vec());
//! loop {
//!     if let Some(GroupEvent::Report(Report::CollectiveComplete { finished, failed, .. })) =
//!         handles[2].events.recv().await
//!     {
//!         assert_eq!((finished, failed), (3, 0));
//!         break;
//!     }
//! }
//! for h in &handles {
//!     h.request(AppRequest::Leave);
//! }
//! # });
//! ```

#![warn(missing_docs)]

pub mod auth;
pub mod bootstrap;
mod conn;
pub mod error;
pub mod group;
pub mod host_driver;
pub mod measure;
pub mod outcome;
pub mod piece_file;
pub mod secure;
pub mod sink;
pub mod timeouts;
pub mod trees;
pub mod wire;

pub use error::NetError;
pub use outcome::{bind, NetEvent, NodeResult, RunOutcome, MAX_PIECE_BYTES};
pub use sink::{Delivered, OutputSpec};
pub use timeouts::Timeouts;

/// The protocol crate's multicast vocabulary, so a caller can describe a multicast without
/// depending on `windrose-proto` itself.
pub mod multicast {
    pub use windrose_proto::bittorrent::BitTorrentConfig;
    pub use windrose_proto::mob::{MobConfig, MobVariant};
    pub use windrose_proto::multicast::{MulticastProtocol, MulticastSpec};
    pub use windrose_proto::tree_multicast::{PlanTree, TreeMulticastConfig, TreePlan};
}

/// The session protocol version this build speaks (group files and handshakes carry it).
/// Version 2: the session is the Host's, in proto frames; [`wire`]'s control frames only open
/// (and refuse) connections. Version 1 was the one-shot session of control frames (job, ready,
/// go, report, bye) that a root ran over every node.
pub const PROTOCOL_VERSION: u32 = 2;

/// Maps a file read-only as [`bytes::Bytes`] without reading it into memory: the root of a
/// broadcast sends it straight from the page cache, and payload slices stay zero-copy.
///
/// The file must not be modified while it is mapped (the bytes sent would change, and the
/// receivers' BLAKE3 would no longer match the root's): [`SourceFile::map`] keeps what the root
/// needs to notice. An empty file gives empty bytes. Anything but a regular file is refused.
pub fn map_file(path: &std::path::Path) -> Result<bytes::Bytes, NetError> {
    SourceFile::map(path).map(|(data, _)| data)
}

/// A file mapped as a root's data, with its length and modification time when it was mapped:
/// a root given it ([`GroupHandle::watch_source`](host_driver::GroupHandle::watch_source))
/// checks it every tick (and a multicast root's machine checks each piece against the
/// manifest before it first sends it), and calls the run off with [`SourceFile::changed`]'s reason when it
/// changed (a file truncated under a mapping also turns sends into "Bad address" errors and
/// reads into SIGBUS).
#[derive(Debug)]
pub struct SourceFile {
    path: std::path::PathBuf,
    file: std::fs::File,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl SourceFile {
    /// Maps `path` read-only (see [`map_file`]) and remembers what it was.
    pub fn map(
        path: &std::path::Path,
    ) -> Result<(bytes::Bytes, std::sync::Arc<SourceFile>), NetError> {
        // Checked before opening: opening a FIFO waits for a writer (for ever), and a device or
        // directory has no length to map.
        let not_regular = |t: &std::fs::FileType| NetError::Io {
            what: format!("reading {}", path.display()),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "it is {}: the data to send must be a regular file",
                    sink::file_kind(t)
                ),
            ),
        };
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => return Err(not_regular(&m.file_type())),
            _ => {}
        }
        let file = std::fs::File::open(path).map_err(|source| NetError::Io {
            what: format!("opening {}", path.display()),
            source,
        })?;
        let meta = file.metadata().map_err(|source| NetError::Io {
            what: format!("reading the size of {}", path.display()),
            source,
        })?;
        if !meta.is_file() {
            return Err(not_regular(&meta.file_type()));
        }
        let source = std::sync::Arc::new(SourceFile {
            path: path.to_path_buf(),
            len: meta.len(),
            modified: meta.modified().ok(),
            file,
        });
        if source.len == 0 {
            return Ok((bytes::Bytes::new(), source));
        }
        // SAFETY: the mapping is read-only and private to this process; the documented contract
        // is that the file is not truncated or modified while it is mapped (as for any reader),
        // and a root checks that it was not (`SourceFile::changed`).
        let map = unsafe { memmap2::Mmap::map(&source.file) }.map_err(|e| NetError::Io {
            what: format!("mapping {}", path.display()),
            source: e,
        })?;
        Ok((bytes::Bytes::from_owner(map), source))
    }

    /// The file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Why the file is no longer what was mapped (shorter, longer, modified, gone), or None.
    pub fn changed(&self) -> Option<String> {
        let path = self.path.display();
        match self.file.metadata() {
            Err(e) => Some(format!("the source file {path} cannot be checked: {e}")),
            Ok(m) if m.len() < self.len => Some(format!(
                "the source file {path} was truncated during the run ({} bytes, was {})",
                m.len(),
                self.len
            )),
            Ok(m) if m.len() != self.len => Some(format!(
                "the source file {path} grew during the run ({} bytes, was {})",
                m.len(),
                self.len
            )),
            Ok(m) if m.modified().ok() != self.modified => Some(format!(
                "the source file {path} was modified during the run: what the nodes received \
                 would not be one version of it"
            )),
            Ok(_) => None,
        }
    }
}

/// `n` pseudo-random bytes from `seed`, the same as [`random_payload`]'s, wherever they fit: in
/// memory when they take at most a quarter of the available memory, else in an unlinked
/// temporary file (in the system's temporary directory) written 1 MiB at a time and mapped.
/// When the file system cannot hold them either, an error says how much each has, before
/// anything is written (a payload built in memory regardless aborted the process).
pub fn random_data(n: u64, seed: u64) -> Result<bytes::Bytes, NetError> {
    if outcome::fits_in_memory(n) {
        if let Ok(len) = usize::try_from(n) {
            return Ok(random_payload(len, seed));
        }
    }
    random_file(n, seed, &std::env::temp_dir())
}

/// [`random_data`] in an unlinked temporary file in `dir`.
fn random_file(n: u64, seed: u64, dir: &std::path::Path) -> Result<bytes::Bytes, NetError> {
    use rand::{RngCore, SeedableRng};
    use std::io::Write;
    let free = free_bytes(dir);
    if free.is_some_and(|f| f < n) {
        return Err(NetError::Setup(format!(
            "a random payload of {n} bytes fits neither in memory (a quarter of the available \
             memory at most) nor in {} ({} bytes free): ask for less, or give a file",
            dir.display(),
            free.unwrap_or(0)
        )));
    }
    let io = |what: &str, source| NetError::Io {
        what: format!(
            "{what} a temporary file for the random payload in {}",
            dir.display()
        ),
        source,
    };
    let file = tempfile::tempfile_in(dir).map_err(|e| io("creating", e))?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut w = std::io::BufWriter::with_capacity(1 << 20, &file);
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = n;
    while left > 0 {
        // Whole chunks are multiples of 4 bytes: the stream is the one a single fill gives.
        let k = left.min(chunk.len() as u64) as usize;
        rng.fill_bytes(&mut chunk[..k]);
        w.write_all(&chunk[..k]).map_err(|e| io("writing", e))?;
        left -= k as u64;
    }
    w.flush().map_err(|e| io("writing", e))?;
    drop(w);
    if n == 0 {
        return Ok(bytes::Bytes::new());
    }
    // SAFETY: an unlinked file only this process knows, never written again.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io("mapping", e))?;
    Ok(bytes::Bytes::from_owner(map))
}

/// Bytes free for an unprivileged user on the file system of `dir` (None if unknown).
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain old data, for which all zeros is a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs(3) with a NUL-terminated path and a struct it fills.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    // fsblkcnt_t and c_ulong are u64 on the 64-bit Linux targets this runs on.
    #[allow(clippy::useless_conversion)]
    Some(u64::from(s.f_bavail).saturating_mul(u64::from(s.f_frsize)))
}

/// `n` pseudo-random bytes from `seed` (ChaCha8): the payload `windrose local` makes when no
/// file is given, reproducible from its seed.
pub fn random_payload(n: usize, seed: u64) -> bytes::Bytes {
    use rand::{RngCore, SeedableRng};
    let mut v = vec![0u8; n];
    rand_chacha::ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut v);
    bytes::Bytes::from(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The payload written to a file is the one built in memory (chunk by chunk, the same
    /// ChaCha8 stream), and a payload larger than the file system is refused before anything
    /// is written.
    #[test]
    fn a_random_payload_in_a_file_is_the_one_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let n = (3 << 20) + 5;
        let f = random_file(n as u64, 42, dir.path()).unwrap();
        assert_eq!(f, random_payload(n, 42));
        assert_eq!(random_file(0, 1, dir.path()).unwrap().len(), 0);
        let e = random_file(u64::MAX / 2, 1, dir.path()).unwrap_err();
        assert!(e.to_string().contains("fits neither in memory"), "{e}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
