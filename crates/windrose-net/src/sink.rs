//! Where delivered data goes: nowhere (hashed only), memory, or a file written under a
//! temporary name in the same directory and renamed to its final name only when the collective
//! completed; and which output paths are refused (anything but a regular file).

use bytes::Bytes;
use std::path::{Path, PathBuf};

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
