//! Small file-system helpers shared by commands that write files.

use std::io::Write;
use std::path::Path;

/// Replaces `path` with `bytes` atomically (a temp file in the same folder,
/// then a rename): readers see the old or the new file, never half of one.
/// Not flushed to disk: for derived files that SQLite's record can rebuild.
pub fn write_replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write(path, bytes, false)
}

/// [`write_replace`], and flushed to disk before the rename, so a power loss
/// never leaves an empty file: for files the user owns (config).
pub fn write_durable(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write(path, bytes, true)
}

fn write(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    if sync {
        tmp.as_file().sync_all()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
