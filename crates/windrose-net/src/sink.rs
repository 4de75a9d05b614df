//! Where delivered data goes: nowhere (hashed only), memory (the zero-copy pieces), or a file
//! written under a temporary name in the same directory and renamed to its final name only when
//! the collective completed. Every mode hashes what it got with BLAKE3.
//!
//! The writing and hashing happen on a plain thread fed through a bounded channel, so a slow disk
//! slows the node down (backpressure reaches the sender through TCP) instead of filling memory,
//! and a multi-GiB file is never held in memory.

use crate::error::NetError;
use bytes::Bytes;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use tokio::sync::{mpsc, oneshot};

/// Pieces queued between the driver and the writing thread (each at most one frame payload).
const SINK_QUEUE: usize = 16;

/// What a node does with the data delivered to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum OutputSpec {
    /// Hash it and drop it.
    #[default]
    Discard,
    /// Keep it in memory (tests, small payloads).
    Memory,
    /// Stream it to this file (temporary name first, renamed when complete).
    File(PathBuf),
}

/// What became of the delivered data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Delivered {
    /// Nothing kept (discarded, or the run failed and the partial file was removed).
    #[default]
    Nothing,
    /// The bytes, as the zero-copy pieces they arrived in.
    Memory(Vec<Bytes>),
    /// The complete file.
    File(PathBuf),
}

impl Delivered {
    /// The bytes kept in memory, concatenated (empty for the other variants).
    pub fn to_vec(&self) -> Vec<u8> {
        match self {
            Delivered::Memory(pieces) => pieces.concat(),
            _ => Vec::new(),
        }
    }
}

/// What the sink saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkSummary {
    /// Bytes delivered.
    pub bytes: u64,
    /// BLAKE3 of them, in order (hex), unless hashing was turned off.
    pub blake3: Option<String>,
    /// Where they are.
    pub delivered: Delivered,
}

enum Cmd {
    Data(u64, Bytes),
    Finish { commit: bool },
}

/// The temporary name of `path` while it is written: `.NAME.windrose-partial-PID-NONCE` in the
/// same directory, so the final rename never crosses file systems.
pub fn partial_path(path: &Path, nonce: u64) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    path.with_file_name(format!(
        ".{name}.windrose-partial-{}-{nonce:016x}",
        std::process::id()
    ))
}

/// Why `path` cannot be a node's output, or None: it must be a regular file or a new name in an
/// existing directory. The output is renamed into place at the end, and a rename replaces
/// whatever has the name: a FIFO, a device such as /dev/null (when run as root), a symbolic
/// link (the link, not its target) would be turned into a plain file, and a directory would
/// only fail after the whole transfer. Symbolic links are refused rather than followed, so
/// the file written is always the one named.
pub fn output_path_problem(path: &Path) -> Option<String> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => None,
        Ok(m) => Some(format!(
            "{} exists and is {}: the output must be a regular file or a new name",
            path.display(),
            file_kind(&m.file_type())
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            if path.file_name().is_none() {
                return Some(format!("{} does not name a file", path.display()));
            }
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => None,
                Ok(_) => Some(format!(
                    "{}: {} is not a directory",
                    path.display(),
                    dir.display()
                )),
                Err(e) => Some(format!(
                    "{}: its directory {}: {e}",
                    path.display(),
                    dir.display()
                )),
            }
        }
        Err(e) => Some(format!("{}: {e}", path.display())),
    }
}

/// What a file that is not a regular file is, in words.
pub(crate) fn file_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// The partial files an earlier life of this node left for the same run (`nonce`) beside
/// `path`, largest first: a process killed mid-run leaves its temporary file behind.
pub fn partials_of(path: &Path, nonce: u64) -> Vec<PathBuf> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    let (prefix, suffix) = (
        format!(".{name}.windrose-partial-"),
        format!("-{nonce:016x}"),
    );
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(&prefix) && n.ends_with(&suffix)
        })
        .filter_map(|e| Some((e.metadata().ok()?.len(), e.path())))
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    found.into_iter().map(|(_, p)| p).collect()
}

/// Where a resumed output continues: a partial file and how many of its first bytes it already
/// holds (they are hashed when delivered, not written again; the rest is cut off). A multicast
/// node's pieces are written at their offsets by its piece file (`piece_file`), so its whole
/// length is kept.
#[derive(Clone, Debug)]
pub(crate) struct Resume {
    pub(crate) file: PathBuf,
    pub(crate) keep: u64,
}

/// The driver's handle on the writing thread.
pub(crate) struct Sink {
    tx: mpsc::Sender<Cmd>,
    result: Option<oneshot::Receiver<Result<SinkSummary, NetError>>>,
    finishing: bool,
}

impl Sink {
    /// Starts the thread (creating the temporary file now, so a bad path fails early).
    #[cfg(test)]
    pub(crate) fn start(spec: &OutputSpec, nonce: u64, hash: bool) -> Result<Sink, NetError> {
        Sink::resume(spec, nonce, hash, None)
    }

    /// Starts the thread on the partial file of `resume` (a file output only): it takes this
    /// process's temporary name, is cut to the verified bytes, and the delivered bytes that it
    /// already holds are hashed, not written again.
    pub(crate) fn resume(
        spec: &OutputSpec,
        nonce: u64,
        hash: bool,
        resume: Option<Resume>,
    ) -> Result<Sink, NetError> {
        let (tx, rx) = mpsc::channel(SINK_QUEUE);
        let (done_tx, done_rx) = oneshot::channel();
        let target = match spec {
            OutputSpec::Discard => Target::Discard,
            OutputSpec::Memory => Target::Memory(Vec::new()),
            OutputSpec::File(path) => {
                if let Some(why) = output_path_problem(path) {
                    return Err(NetError::Setup(format!("output {why}")));
                }
                let tmp = partial_path(path, nonce);
                let output_err = |source| NetError::Output {
                    path: tmp.display().to_string(),
                    source,
                };
                let (file, skip) = match resume {
                    Some(r) => {
                        std::fs::rename(&r.file, &tmp).map_err(output_err)?;
                        let mut file = std::fs::OpenOptions::new()
                            .write(true)
                            .open(&tmp)
                            .map_err(output_err)?;
                        file.set_len(r.keep).map_err(output_err)?;
                        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(r.keep))
                            .map_err(output_err)?;
                        (file, r.keep)
                    }
                    None => (File::create(&tmp).map_err(output_err)?, 0),
                };
                Target::File {
                    file,
                    tmp,
                    path: path.clone(),
                    skip,
                }
            }
        };
        std::thread::Builder::new()
            .name("windrose-sink".into())
            .spawn(move || {
                let _ = done_tx.send(run(rx, target, hash));
            })
            .map_err(|source| NetError::Io {
                what: "starting the output thread".into(),
                source,
            })?;
        Ok(Sink {
            tx,
            result: Some(done_rx),
            finishing: false,
        })
    }

    /// Hands bytes `offset..` to the thread (waits when it is behind).
    pub(crate) async fn deliver(&mut self, offset: u64, data: Bytes) -> Result<(), NetError> {
        if self.tx.send(Cmd::Data(offset, data)).await.is_err() {
            // The thread stopped early: its error comes with the result.
            return self.fail_early().await;
        }
        Ok(())
    }

    async fn fail_early(&mut self) -> Result<(), NetError> {
        match self.result.take() {
            Some(rx) => match rx.await {
                Ok(Err(e)) => Err(e),
                _ => Err(NetError::Failed("the output thread stopped".into())),
            },
            None => Err(NetError::Failed("the output thread stopped".into())),
        }
    }

    /// Ends the output: `commit` renames the file into place, otherwise it is removed. Returns
    /// the receiver of the summary (the thread may still be writing).
    pub(crate) async fn finish(
        &mut self,
        commit: bool,
    ) -> Option<oneshot::Receiver<Result<SinkSummary, NetError>>> {
        if !self.finishing {
            self.finishing = true;
            let _ = self.tx.send(Cmd::Finish { commit }).await;
        }
        self.result.take()
    }
}

enum Target {
    Discard,
    Memory(Vec<Bytes>),
    File {
        file: File,
        tmp: PathBuf,
        path: PathBuf,
        /// Bytes at the start of the file that are already there (a resumed output).
        skip: u64,
    },
}

fn run(
    mut rx: mpsc::Receiver<Cmd>,
    mut target: Target,
    hash: bool,
) -> Result<SinkSummary, NetError> {
    let mut hasher = blake3::Hasher::new();
    let mut written = 0u64;
    let mut commit = false;
    let mut failure: Option<NetError> = None;
    while let Some(cmd) = rx.blocking_recv() {
        match cmd {
            Cmd::Data(offset, data) => {
                if failure.is_some() {
                    continue;
                }
                if offset != written {
                    failure = Some(NetError::Failed(format!(
                        "data delivered out of order: offset {offset}, expected {written}"
                    )));
                    break;
                }
                if hash {
                    hasher.update(&data);
                }
                written += data.len() as u64;
                match &mut target {
                    Target::Discard => {}
                    Target::Memory(v) => v.push(data),
                    Target::File {
                        file, tmp, skip, ..
                    } => {
                        // Bytes a resumed file already holds are not written again.
                        let new = (written.saturating_sub(*skip) as usize).min(data.len());
                        if let Err(source) = file.write_all(&data[data.len() - new..]) {
                            failure = Some(NetError::Output {
                                path: tmp.display().to_string(),
                                source,
                            });
                            break;
                        }
                    }
                }
            }
            Cmd::Finish { commit: c } => {
                commit = c;
                break;
            }
        }
    }
    let blake3 = hash.then(|| hasher.finalize().to_hex().to_string());
    let delivered = match target {
        Target::Discard => Delivered::Nothing,
        Target::Memory(v) => Delivered::Memory(v),
        Target::File {
            file, tmp, path, ..
        } => {
            let done = commit && failure.is_none();
            // Checked again at the end: the name may have been taken meanwhile.
            let taken = output_path_problem(&path);
            let result = if let (true, Some(why)) = (done, taken) {
                drop(file);
                Err(NetError::Setup(format!(
                    "output {why}; the data received was not kept"
                )))
            } else if done {
                file.sync_all()
                    .and_then(|_| {
                        drop(file);
                        std::fs::rename(&tmp, &path)
                    })
                    .map_err(|source| NetError::Output {
                        path: path.display().to_string(),
                        source,
                    })
            } else {
                drop(file);
                Ok(())
            };
            if !done || result.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            result?;
            if done {
                Delivered::File(path)
            } else {
                Delivered::Nothing
            }
        }
    };
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(SinkSummary {
        bytes: written,
        blake3,
        delivered,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn file_appears_only_when_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        let mut sink = Sink::start(&OutputSpec::File(path.clone()), 1, true).unwrap();
        sink.deliver(0, Bytes::from_static(b"abc")).await.unwrap();
        sink.deliver(3, Bytes::from_static(b"de")).await.unwrap();
        assert!(!path.exists());
        let s = sink.finish(true).await.unwrap().await.unwrap().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"abcde");
        assert_eq!(s.blake3, Some(blake3::hash(b"abcde").to_hex().to_string()));
        assert_eq!(s.delivered, Delivered::File(path.clone()));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        let other = dir.path().join("aborted.bin");
        let mut sink = Sink::start(&OutputSpec::File(other.clone()), 2, true).unwrap();
        sink.deliver(0, Bytes::from_static(b"abc")).await.unwrap();
        let s = sink.finish(false).await.unwrap().await.unwrap().unwrap();
        assert_eq!(s.delivered, Delivered::Nothing);
        assert!(!other.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// A name taken by a FIFO while the data arrived is not renamed over at the end: the FIFO
    /// stays, the partial file goes, and the error says why.
    #[tokio::test]
    async fn a_name_taken_by_a_fifo_meanwhile_is_not_renamed_over() {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        let mut sink = Sink::start(&OutputSpec::File(path.clone()), 3, true).unwrap();
        sink.deliver(0, Bytes::from_static(b"abc")).await.unwrap();
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = sink.finish(true).await.unwrap().await.unwrap().unwrap_err();
        assert!(e.to_string().contains("is a FIFO"), "{e}");
        let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
        assert!(kind.is_fifo());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // Refused up front too.
        let e = Sink::start(&OutputSpec::File(path.clone()), 4, true)
            .err()
            .unwrap();
        assert!(e.to_string().contains("is a FIFO"), "{e}");
    }

    /// A resumed output takes over the earlier life's partial file, cuts what was not verified,
    /// writes only the bytes past the kept ones, and hashes everything delivered.
    #[tokio::test]
    async fn resumed_file_keeps_the_verified_prefix_and_writes_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        let nonce = 7;
        let earlier = dir
            .path()
            .join(format!(".out.bin.windrose-partial-1-{nonce:016x}"));
        std::fs::write(&earlier, b"abcXYZ").unwrap();
        let unrelated = dir
            .path()
            .join(format!(".out.bin.windrose-partial-1-{:016x}", 8));
        std::fs::write(&unrelated, b"other run").unwrap();
        assert_eq!(partials_of(&path, nonce), vec![earlier.clone()]);
        let resume = Resume {
            file: earlier.clone(),
            keep: 3,
        };
        let mut sink =
            Sink::resume(&OutputSpec::File(path.clone()), nonce, true, Some(resume)).unwrap();
        assert!(!earlier.exists(), "renamed to this process's partial name");
        sink.deliver(0, Bytes::from_static(b"abc")).await.unwrap();
        sink.deliver(3, Bytes::from_static(b"def")).await.unwrap();
        let s = sink.finish(true).await.unwrap().await.unwrap().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"abcdef");
        assert_eq!(s.bytes, 6);
        assert_eq!(s.blake3, Some(blake3::hash(b"abcdef").to_hex().to_string()));
        assert!(partials_of(&path, nonce).is_empty());
        assert!(unrelated.exists());
    }
}
