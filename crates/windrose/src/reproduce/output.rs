//! Writing result files atomically: into a temporary file in the destination directory, then a
//! rename, so a reader never sees half a CSV or PNG and an interrupted run leaves the previous
//! file intact.

use anyhow::{Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// Creates the output directory (and its parents) if needed.
pub(crate) fn create_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the output directory {}", dir.display()))
}

/// A hidden temporary path next to `path` that keeps its extension (the PNG encoder picks the
/// format from it): `dir/.name.tmp-PID.ext`.
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    dir.join(format!(".{stem}.tmp-{}{ext}", std::process::id()))
}

/// Moves a finished temporary file onto `path`.
pub(crate) fn commit(temp: &Path, path: &Path) -> Result<()> {
    fs::rename(temp, path).with_context(|| {
        let _ = fs::remove_file(temp);
        format!("cannot move {} to {}", temp.display(), path.display())
    })
}

/// Writes `bytes` to `path` atomically.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let temp = temp_path(path);
    if let Err(e) = fs::write(&temp, bytes) {
        let _ = fs::remove_file(&temp);
        return Err(e).with_context(|| format!("cannot write {}", temp.display()));
    }
    commit(&temp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_replaces_without_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.csv");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.csv")]);
        assert!(temp_path(&path).to_string_lossy().ends_with(".csv"));
    }
}
