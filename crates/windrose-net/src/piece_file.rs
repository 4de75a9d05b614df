//! A multicast node's received pieces kept in a memory-mapped file instead of on the heap: each
//! verified piece is copied once to its offset in the file, and the node holds (and sends to its
//! peers) views of the mapping from then on. The page cache decides what stays resident, so a
//! node can take part in a multicast of more data than it has memory; with a file output the
//! file is the output's partial file, so a node killed mid-run leaves every piece it had at its
//! place, and its next life reads them all back ([`PieceFile::read_back`]), not only a prefix.
//! [`FileShelf`] does the same for a long-lived group's member (the Host's `PieceShelf`).

use crate::error::NetError;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use windrose_proto::collective::CollectiveSpec;
use windrose_proto::frame::TransferId;
use windrose_proto::host::{PieceShelf, Shelved};
use windrose_proto::pieces::{Manifest, PieceKeeper};

/// The mapping of a file of the data's full length.
pub struct PieceFile {
    file: File,
    map: Arc<memmap2::MmapRaw>,
    /// Bytes of the pieces the store took in place (read back from an earlier life and
    /// verified by the machine): what a restarted node resumed.
    kept_in_place: AtomicU64,
}

/// A view of `range` of the mapping: what a [`Bytes`] of a kept piece owns.
struct View {
    map: Arc<memmap2::MmapRaw>,
    start: usize,
    len: usize,
}

impl AsRef<[u8]> for View {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `start..start + len` lies inside the mapping (checked when the view was
        // made), the mapping lives as long as `self.map`, and the range is written only once,
        // before the view of it is handed out (`PieceFile::keep`).
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(self.start), self.len) }
    }
}

/// Reserves the disk blocks of the whole file: writing to a mapped hole on a full disk is a
/// SIGBUS, so the space is taken now, where a full disk is a plain error. File systems that
/// cannot reserve space (EOPNOTSUPP) are left as they are.
fn reserve(file: &File, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let Ok(len) = libc::off_t::try_from(len) else {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    };
    if len == 0 {
        return Ok(());
    }
    // SAFETY: posix_fallocate on an open file descriptor this function borrows.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 | libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}

impl PieceFile {
    /// Maps `file`, first setting its length to `total_len` (a shorter file grows with zeros,
    /// a longer one is cut). `what` names it in errors.
    fn map(file: File, total_len: u64, what: &str) -> Result<PieceFile, NetError> {
        let io = |source| NetError::Io {
            what: format!("mapping {what}"),
            source,
        };
        file.set_len(total_len).map_err(io)?;
        reserve(&file, total_len).map_err(io)?;
        let map = memmap2::MmapRaw::map_raw(&file).map_err(io)?;
        Ok(PieceFile {
            file,
            map: Arc::new(map),
            kept_in_place: AtomicU64::new(0),
        })
    }

    /// Maps the file at `path` (created if missing, kept if present: a resumed output). A file
    /// this call created is removed again when it cannot be sized, reserved or mapped (a full
    /// disk): nothing is left behind.
    pub fn open(path: &Path, total_len: u64) -> Result<PieceFile, NetError> {
        let existed = std::fs::symlink_metadata(path).is_ok();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|source| NetError::Output {
                path: path.display().to_string(),
                source,
            })?;
        PieceFile::map(file, total_len, &path.display().to_string()).inspect_err(|_| {
            if !existed {
                let _ = std::fs::remove_file(path);
            }
        })
    }

    /// Maps an unlinked temporary file (in the system's temporary directory): for a node that
    /// keeps no output but must hold the pieces to serve its peers.
    pub fn anonymous(total_len: u64) -> Result<PieceFile, NetError> {
        let file = tempfile::tempfile().map_err(|source| NetError::Io {
            what: "creating a temporary file for the received pieces".into(),
            source,
        })?;
        PieceFile::map(file, total_len, "a temporary file for the received pieces")
    }

    fn view(&self, start: u64, len: usize) -> Option<Bytes> {
        let start = usize::try_from(start).ok()?;
        (start.checked_add(len)? <= self.map.len()).then(|| {
            Bytes::from_owner(View {
                map: self.map.clone(),
                start,
                len,
            })
        })
    }

    /// Every piece of `manifest` as it stands in the file, unverified (a killed earlier life
    /// leaves zeros where it had nothing, and possibly a piece it was writing when it died):
    /// the rejoining machine verifies them, and those it stores are counted by
    /// [`PieceFile::resumed_bytes`].
    pub fn read_back(&self, manifest: &Manifest) -> Vec<(u32, Bytes)> {
        (0..manifest.piece_count())
            .filter_map(|i| {
                let r = manifest.piece_range(i)?;
                Some((i, self.view(r.start, (r.end - r.start) as usize)?))
            })
            .collect()
    }

    /// Bytes of the read-back pieces a store kept (they passed its verification).
    pub fn resumed_bytes(&self) -> u64 {
        self.kept_in_place.load(Ordering::Relaxed)
    }

    /// This mapping as the keeper of a piece store.
    pub fn keeper(self: &Arc<Self>) -> Arc<dyn PieceKeeper> {
        self.clone()
    }
}

/// A long-lived member's [`PieceShelf`]: each multicast's pieces in a piece file
/// `DIR/.transfer-T.pieces` (T its transfer), so a member killed mid-run and started again
/// over the same folder resumes from every piece its earlier life verified. A collective
/// heard of for the first time starts its file over; [`FileShelf::forget`] removes it.
pub struct FileShelf {
    dir: PathBuf,
    files: Mutex<BTreeMap<TransferId, Arc<PieceFile>>>,
}

impl FileShelf {
    /// A shelf in `dir` (which must exist).
    pub fn new(dir: &Path) -> FileShelf {
        FileShelf {
            dir: dir.to_path_buf(),
            files: Mutex::new(BTreeMap::new()),
        }
    }

    /// Where the pieces of `transfer` are kept.
    pub fn path(&self, transfer: TransferId) -> PathBuf {
        self.dir.join(format!(".transfer-{transfer}.pieces"))
    }

    /// Bytes of `transfer` resumed from an earlier life's file (verified again).
    pub fn resumed_bytes(&self, transfer: TransferId) -> u64 {
        self.lock().get(&transfer).map_or(0, |f| f.resumed_bytes())
    }

    /// Lets go of `transfer`'s file and removes it.
    pub fn forget(&self, transfer: TransferId) {
        self.lock().remove(&transfer);
        let _ = std::fs::remove_file(self.path(transfer));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<TransferId, Arc<PieceFile>>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl PieceShelf for FileShelf {
    fn shelf(
        &self,
        transfer: TransferId,
        spec: &CollectiveSpec,
        total_len: u64,
        rejoin: bool,
    ) -> Result<Shelved, String> {
        let CollectiveSpec::Multicast { manifest, .. } = spec else {
            return Ok(Shelved::default());
        };
        let manifest = manifest.to_manifest(total_len)?;
        let path = self.path(transfer);
        if !rejoin {
            // Whatever a file of this name holds belongs to another run.
            let _ = std::fs::remove_file(&path);
        }
        let file = Arc::new(PieceFile::open(&path, total_len).map_err(|e| e.to_string())?);
        let held = if rejoin {
            file.read_back(&manifest)
        } else {
            Vec::new()
        };
        self.lock().insert(transfer, file.clone());
        Ok(Shelved {
            keeper: Some(file.keeper()),
            held,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// A `--once` member's output file (`windrose node --once --out FILE`).

/// One collective's partial output file: where it is, the multicast's piece file in it, and
/// whether this life was taken back into a running collective.
struct Partial {
    path: PathBuf,
    pieces: Option<Arc<PieceFile>>,
    rejoined: bool,
}

/// A member's [`PieceShelf`] over its output files: each collective is written under its
/// output's partial name ([`partial_path`](crate::sink::partial_path), this process's id and
/// the transfer's), a multicast's pieces at their offsets as they verify. A member killed
/// mid-run leaves that file; its next life, taken back by the initiator, adopts it (renamed to
/// its own partial name) and resumes from every piece in it that verifies again. A collective
/// heard of for the first time starts over, removing what an earlier life left.
///
/// The output is one file for every collective (`node --once --out FILE`: a one-collective
/// member) or `DIR/transfer-T` per collective (`group serve --out-dir DIR`).
pub struct OutputShelf {
    out: Output,
    partials: Mutex<BTreeMap<TransferId, Partial>>,
}

/// Where an [`OutputShelf`]'s collectives go.
enum Output {
    File(PathBuf),
    Dir(PathBuf),
}

impl OutputShelf {
    /// A shelf writing every collective to the partial files of `out`.
    pub fn new(out: &Path) -> OutputShelf {
        OutputShelf {
            out: Output::File(out.to_path_buf()),
            partials: Mutex::new(BTreeMap::new()),
        }
    }

    /// A shelf writing each collective T to the partial files of `dir/transfer-T`.
    pub fn in_dir(dir: &Path) -> OutputShelf {
        OutputShelf {
            out: Output::Dir(dir.to_path_buf()),
            partials: Mutex::new(BTreeMap::new()),
        }
    }

    /// The output of `transfer`: where its partial file is renamed when the member's part
    /// finished.
    pub fn output(&self, transfer: TransferId) -> PathBuf {
        match &self.out {
            Output::File(f) => f.clone(),
            Output::Dir(d) => d.join(format!("transfer-{transfer}")),
        }
    }

    /// The partial file of `transfer` and whether its pieces are written there already (a
    /// multicast); None before the collective was built here.
    pub fn partial(&self, transfer: TransferId) -> Option<(PathBuf, bool)> {
        self.lock()
            .get(&transfer)
            .map(|p| (p.path.clone(), p.pieces.is_some()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<TransferId, Partial>> {
        self.partials.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl PieceShelf for OutputShelf {
    fn shelf(
        &self,
        transfer: TransferId,
        spec: &CollectiveSpec,
        total_len: u64,
        rejoin: bool,
    ) -> Result<Shelved, String> {
        // Only a collective that hands this member the root's data has anything for `--out`
        // (a scatter's share is computed, a sort writes its own range).
        if spec.descriptor().delivers != windrose_proto::collective::Delivers::AllData {
            return Ok(Shelved::default());
        }
        let nonce = u64::from(transfer.0);
        let out = self.output(transfer);
        let path = crate::sink::partial_path(&out, nonce);
        let earlier = crate::sink::partials_of(&out, nonce);
        let mut adopt = None;
        for p in earlier.into_iter().filter(|p| *p != path) {
            if rejoin && adopt.is_none() {
                adopt = Some(p); // the largest: the earlier life's
            } else {
                let _ = std::fs::remove_file(p);
            }
        }
        if let Some(p) = adopt {
            std::fs::rename(&p, &path).map_err(|e| format!("adopting {}: {e}", p.display()))?;
        }
        let (pieces, held) = match spec {
            CollectiveSpec::Multicast { manifest, .. } => {
                let manifest = manifest.to_manifest(total_len)?;
                let file = Arc::new(PieceFile::open(&path, total_len).map_err(|e| e.to_string())?);
                let held = if rejoin {
                    file.read_back(&manifest)
                } else {
                    Vec::new()
                };
                (Some(file), held)
            }
            // In order: the member writes them itself, from the start.
            _ => (None, Vec::new()),
        };
        let keeper = pieces.as_ref().map(|f| f.keeper());
        self.lock().insert(
            transfer,
            Partial {
                path,
                pieces,
                rejoined: rejoin,
            },
        );
        Ok(Shelved { keeper, held })
    }

    fn resumed_bytes(&self, transfer: TransferId) -> Option<u64> {
        let partials = self.lock();
        let p = partials.get(&transfer).filter(|p| p.rejoined)?;
        Some(p.pieces.as_ref().map_or(0, |f| f.resumed_bytes()))
    }
}

impl PieceKeeper for PieceFile {
    fn keep(&self, _piece: u32, offset: u64, data: Bytes) -> Bytes {
        use std::os::unix::fs::FileExt;
        let Some(view) = self.view(offset, data.len()) else {
            // Outside the file: the caller verified the piece against the manifest the file
            // was sized from, so this does not happen; keep the bytes in memory rather than
            // lose them.
            return data;
        };
        if view.as_ptr() == data.as_ptr() {
            // Read back from this very place (a restarted node's kept piece).
            self.kept_in_place
                .fetch_add(data.len() as u64, Ordering::Relaxed);
            return view;
        }
        // Written with pwrite, not through the mapping: the kernel copies straight into the
        // page cache, without a page fault per page (1.5x faster on loopback); the mapping
        // then sees the same pages. A failed write (the space was reserved, so an I/O error)
        // keeps the piece in memory rather than hold bytes that are not there.
        match self.file.write_all_at(&data, offset) {
            Ok(()) => view,
            Err(_) => data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use windrose_proto::pieces::PieceStore;

    fn data(n: usize) -> Bytes {
        Bytes::from((0..n).map(|i| (i * 7 + i / 251) as u8).collect::<Vec<_>>())
    }

    /// Pieces stored out of order land at their offsets in the file; the store's bytes are the
    /// file's; the file read back (as a restarted node does) gives every stored piece and only
    /// zeros elsewhere.
    #[test]
    fn kept_pieces_are_the_files_bytes_at_their_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.partial");
        let d = data(10_000);
        let m = Manifest::build(&d, 1024).unwrap();
        let file = Arc::new(PieceFile::open(&path, d.len() as u64).unwrap());
        let mut store = PieceStore::with_keeper(&m, Some(file.keeper()));
        for i in [7u32, 2, 9, 0] {
            // A copy, so the store cannot be holding the caller's allocation.
            assert!(store.insert(i, Bytes::copy_from_slice(&m.slice(&d, i))));
            assert_eq!(store.get(i).unwrap(), &m.slice(&d, i));
        }
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(on_disk.len(), d.len());
        for i in 0..m.piece_count() {
            let r = m.piece_range(i).unwrap();
            let got = &on_disk[r.start as usize..r.end as usize];
            if [7, 2, 9, 0].contains(&i) {
                assert_eq!(got, &d[r.start as usize..r.end as usize], "piece {i}");
            } else {
                assert!(got.iter().all(|&b| b == 0), "piece {i} not written");
            }
        }
        drop(store);
        drop(file);
        let again = PieceFile::open(&path, d.len() as u64).unwrap();
        let back = again.read_back(&m);
        assert_eq!(back.len(), m.piece_count() as usize);
        for (i, bytes) in back {
            let held = [7, 2, 9, 0].contains(&i);
            assert_eq!(bytes == m.slice(&d, i), held, "piece {i}");
        }
    }

    /// A piece read back from the file and stored again is not copied onto itself; the store
    /// then holds the same bytes.
    #[test]
    fn a_piece_read_back_is_kept_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.partial");
        let d = data(3000);
        std::fs::write(&path, &d).unwrap();
        let m = Manifest::build(&d, 1000).unwrap();
        let file = Arc::new(PieceFile::open(&path, d.len() as u64).unwrap());
        let mut store = PieceStore::with_keeper(&m, Some(file.keeper()));
        for (i, bytes) in file.read_back(&m) {
            let ptr = bytes.as_ptr();
            assert!(store.insert(i, bytes));
            assert_eq!(store.get(i).unwrap().as_ptr(), ptr);
            assert_eq!(store.get(i).unwrap(), &m.slice(&d, i));
        }
        assert_eq!(file.resumed_bytes(), 3000);
    }

    /// A piece file that cannot get its space (here: larger than any disk) is an error, and
    /// the file it created is gone (a MOB node on a full disk left its partial file).
    #[test]
    fn a_piece_file_without_space_is_an_error_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.partial");
        let e = PieceFile::open(&path, 1 << 62)
            .err()
            .expect("no disk holds 4 EiB");
        assert!(e.to_string().contains("out.partial"), "{e}");
        assert!(!path.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_anonymous_file_keeps_pieces_too() {
        let d = data(5000);
        let m = Manifest::build(&d, 1000).unwrap();
        let file = Arc::new(PieceFile::anonymous(d.len() as u64).unwrap());
        assert_eq!(file.map.len(), 5000);
        let mut store = PieceStore::with_keeper(&m, Some(file.keeper()));
        assert!(store.insert(4, m.slice(&d, 4)));
        assert_eq!(store.get(4).unwrap(), &m.slice(&d, 4));
    }
}
