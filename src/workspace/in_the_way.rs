//! What stands, in the user's folder, where a run's result puts a path it
//! adds — for `apply`, before anything is written.
//!
//! A result may change a path's type: a folder `d/` becomes a file `d`, a
//! file `d` a folder `d/`, a symlink a folder. Then the path it adds is, on
//! disk, a folder (or one of its parents is a file) that the result takes
//! away at the same time — not in the way. What is in the way is what the
//! result does not remove: a file of the user's where it writes, a parent
//! the result keeps as a file, anything under a folder it replaces by a
//! file. Paths are looked at without following symlinks, so a symlinked
//! parent never makes a path seem to be (or not be) somewhere else.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::Metadata;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::error::{Result, WorkspaceError};
use super::git::lossy;

/// What is on disk at a tree's path under a root.
pub(crate) enum OnDisk {
    /// Nothing, not even a parent folder in the way.
    Absent,
    /// One of its parents (this one: a path of the tree) is not a folder.
    UnderNonFolder(Vec<u8>),
    /// The path itself (not followed if it is a symlink).
    Here(Metadata),
}

/// Looks at `raw` (a tree's `/`-separated path) under `root`, one component
/// at a time, without following symlinks.
pub(crate) fn look(root: &Path, raw: &[u8]) -> Result<OnDisk> {
    let parts: Vec<&[u8]> = raw.split(|b| *b == b'/').collect();
    let mut at = root.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        at.push(OsStr::from_bytes(part));
        let meta = match at.symlink_metadata() {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(OnDisk::Absent),
            Err(e) => return Err(WorkspaceError::io("look at", &at, e)),
        };
        if i + 1 == parts.len() {
            return Ok(OnDisk::Here(meta));
        }
        if !meta.is_dir() {
            return Ok(OnDisk::UnderNonFolder(parts[..=i].join(&b'/')));
        }
    }
    Ok(OnDisk::Absent)
}

/// The paths under `root` that the result adding `added` would overwrite
/// or remove although it does not take them away itself (`removed`: the
/// paths it deletes). `left_in` lists what a folder at an added path holds
/// beyond `removed` (the folder goes, and with it whatever is left in it).
pub(crate) fn in_the_way<'a>(
    root: &Path,
    added: impl Iterator<Item = &'a [u8]>,
    removed: &HashSet<&[u8]>,
    left_in: &mut dyn FnMut(&[u8]) -> Result<Vec<String>>,
) -> Result<Vec<String>> {
    let mut found = Vec::new();
    for raw in added {
        match look(root, raw)? {
            OnDisk::Absent => {}
            OnDisk::UnderNonFolder(parent) if removed.contains(parent.as_slice()) => {}
            OnDisk::UnderNonFolder(parent) => found.push(lossy(&parent)),
            OnDisk::Here(meta) if meta.is_dir() => found.extend(left_in(raw)?),
            OnDisk::Here(_) => found.push(lossy(raw)),
        }
    }
    found.sort();
    found.dedup();
    Ok(found)
}

/// What the folder `raw` under `root` holds that is not in `removed`:
/// every file, symlink or other non-folder, by its path from `root`.
pub(crate) fn left_in_folder(
    root: &Path,
    raw: &[u8],
    removed: &HashSet<&[u8]>,
) -> Result<Vec<String>> {
    let mut left = Vec::new();
    let mut folders = vec![raw.to_vec()];
    while let Some(rel) = folders.pop() {
        let dir = root.join(OsStr::from_bytes(&rel));
        let entries = std::fs::read_dir(&dir).map_err(|e| WorkspaceError::io("read", &dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| WorkspaceError::io("read", &dir, e))?;
            let mut path = rel.clone();
            path.push(b'/');
            path.extend_from_slice(entry.file_name().as_bytes());
            let ft = entry
                .file_type()
                .map_err(|e| WorkspaceError::io("look at", entry.path(), e))?;
            if ft.is_dir() {
                folders.push(path);
            } else if !removed.contains(path.as_slice()) {
                left.push(lossy(&path));
            }
        }
    }
    Ok(left)
}
