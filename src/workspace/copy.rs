//! Copying a project folder for `copy` workspaces: the `ignore` crate's walker
//! decides what is copied, as ripgrep would — `.gitignore` (also outside a
//! repository), `.ignore`, the tracking-ignore list; hidden files included.
//! No folder name is special except `.git`, which is never copied (the copy
//! gets a repository of its own). Symlinks are copied as symlinks, never
//! followed; file permissions (the executable bit) are kept.

use std::path::Path;

use ignore::WalkBuilder;
use ignore::overrides::Override;

use super::error::{Result, WorkspaceError};

/// What a copy did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CopyStats {
    pub files: usize,
    pub symlinks: usize,
    pub dirs: usize,
    /// Sockets, fifos, devices: not copied.
    pub skipped_special: Vec<String>,
}

/// Copies `src` into `dest` (which must not exist yet).
pub(crate) fn copy_tree(src: &Path, dest: &Path, noise: &Override) -> Result<CopyStats> {
    std::fs::create_dir_all(dest).map_err(|e| WorkspaceError::io("create", dest, e))?;
    let mut walk = WalkBuilder::new(src);
    walk.standard_filters(false)
        .hidden(false)
        .parents(false)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .overrides(noise.clone())
        .filter_entry(|e| e.file_name() != ".git");
    let mut stats = CopyStats::default();
    for item in walk.build() {
        let entry = item
            .map_err(|e| WorkspaceError::io("read", src, std::io::Error::other(e.to_string())))?;
        if entry.depth() == 0 {
            continue;
        }
        let rel = entry.path().strip_prefix(src).unwrap_or(entry.path());
        let target = dest.join(rel);
        let Some(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            // Folder permissions are not copied: git does not track them, and
            // a read-only source folder must not block copying its contents.
            std::fs::create_dir(&target).map_err(|e| WorkspaceError::io("create", &target, e))?;
            stats.dirs += 1;
        } else if kind.is_symlink() {
            let to = std::fs::read_link(entry.path())
                .map_err(|e| WorkspaceError::io("read the symlink", entry.path(), e))?;
            std::os::unix::fs::symlink(&to, &target)
                .map_err(|e| WorkspaceError::io("create the symlink", &target, e))?;
            stats.symlinks += 1;
        } else if kind.is_file() {
            // std::fs::copy keeps the permission bits (the executable bit).
            std::fs::copy(entry.path(), &target)
                .map_err(|e| WorkspaceError::io("copy", entry.path(), e))?;
            stats.files += 1;
        } else {
            stats
                .skipped_special
                .push(rel.to_string_lossy().into_owned());
        }
    }
    Ok(stats)
}
