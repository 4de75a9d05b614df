//! Where a member's received bytes of one collective go: the partial file its
//! [`OutputShelf`] prepared for it (a multicast's pieces are already there, written as they
//! verified), renamed over the collective's output once the member's part finished; or, with
//! no output, only counted and hashed.

use anyhow::Context as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use windrose_net::piece_file::OutputShelf;
use windrose_proto::TransferId;

/// One collective's received bytes at a member.
pub(super) struct Received {
    hasher: Option<blake3::Hasher>,
    bytes: u64,
    /// The partial file, and the handle this member writes it through (None: the shelf's
    /// piece file holds the bytes).
    file: Option<(PathBuf, Option<std::fs::File>)>,
}

impl Received {
    /// Opens `transfer`'s partial file if `shelf` prepared one; `hash`: BLAKE3 what arrives.
    pub(super) fn new(
        shelf: Option<&OutputShelf>,
        transfer: TransferId,
        hash: bool,
    ) -> anyhow::Result<Received> {
        let file = match shelf.and_then(|s| s.partial(transfer)) {
            Some((part, true)) => Some((part, None)),
            Some((part, false)) => {
                let f = std::fs::File::create(&part)
                    .with_context(|| format!("creating {}", part.display()))?;
                Some((part, Some(f)))
            }
            None => None,
        };
        Ok(Received {
            hasher: hash.then(blake3::Hasher::new),
            bytes: 0,
            file,
        })
    }

    /// Takes a delivery.
    pub(super) fn take(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
        // Deliveries of a collective come in order: the hash is of the bytes as delivered.
        if let Some(h) = self.hasher.as_mut() {
            h.update(data);
        }
        self.bytes += data.len() as u64;
        if let Some((part, Some(f))) = &self.file {
            f.write_all_at(data, offset)
                .with_context(|| format!("writing {}", part.display()))?;
        }
        Ok(())
    }

    /// Bytes delivered so far.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The BLAKE3 of what was delivered, when hashing.
    pub(super) fn blake3(&self) -> Option<String> {
        self.hasher
            .as_ref()
            .map(|h| h.finalize().to_hex().to_string())
    }

    /// Renames the partial file over `out` when `keep`, removes it otherwise; returns where
    /// the data went (None: nowhere, nothing was written).
    pub(super) fn finish(self, out: &Path, keep: bool) -> anyhow::Result<Option<PathBuf>> {
        let Some((part, f)) = self.file else {
            return Ok(None);
        };
        if !keep {
            let _ = std::fs::remove_file(&part);
            return Ok(None);
        }
        if let Some(f) = f {
            f.sync_all()
                .with_context(|| format!("writing {}", part.display()))?;
        }
        // Checked again at the end: a FIFO, device or link put at the name during the run is
        // not renamed over either; the data stays in the partial file, named in the error.
        if let Some(why) = windrose_net::sink::output_path_problem(out) {
            anyhow::bail!("{why}; what was received is kept in {}", part.display());
        }
        std::fs::rename(&part, out)
            .with_context(|| format!("renaming {} to {}", part.display(), out.display()))?;
        Ok(Some(out.to_path_buf()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt as _;

    /// A FIFO put at the output's name during the run is not renamed over: the finish fails,
    /// naming it, and the received bytes stay in the partial file.
    #[test]
    fn a_name_taken_by_a_fifo_meanwhile_is_not_renamed_over() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.bin");
        let part = dir.path().join(".out.bin.partial");
        let file = std::fs::File::create(&part).unwrap();
        let mut r = Received {
            hasher: None,
            bytes: 0,
            file: Some((part.clone(), Some(file))),
        };
        r.take(0, b"received").unwrap();
        let c = std::ffi::CString::new(out.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) on a path in this test's own directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = r.finish(&out, true).unwrap_err().to_string();
        assert!(e.contains("FIFO") && e.contains(".out.bin.partial"), "{e}");
        assert_eq!(std::fs::read(&part).unwrap(), b"received");
        assert!(std::fs::symlink_metadata(&out)
            .unwrap()
            .file_type()
            .is_fifo());
    }

    /// Without a partial file (no output) the bytes are counted and hashed, nothing written.
    #[test]
    fn without_an_output_the_bytes_are_hashed() {
        let mut r = Received::new(None, TransferId(3), true).unwrap();
        r.take(0, b"abc").unwrap();
        r.take(3, b"def").unwrap();
        assert_eq!(r.bytes(), 6);
        assert_eq!(
            r.blake3().unwrap(),
            blake3::hash(b"abcdef").to_hex().to_string()
        );
        assert_eq!(r.finish(Path::new("/nonexistent/x"), true).unwrap(), None);
    }
}
