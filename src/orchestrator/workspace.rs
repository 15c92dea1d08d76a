//! Where a run's agents work: the project itself, or (with `"workspace":
//! "copy"`) a fresh copy under `.modix/runs/<run>/workspace`, so a run never
//! touches the original tree.

use std::io;
use std::path::{Path, PathBuf};

use crate::config::{MODIX_DIR, ProjectPaths, Workspace};

/// Folders never copied: modix's own, VCS data and build output.
const SKIP: [&str; 5] = [MODIX_DIR, ".git", "target", "node_modules", "__pycache__"];

/// Prepares and returns the run's working directory.
pub(super) fn prepare(paths: &ProjectPaths, mode: Workspace, run_id: &str) -> io::Result<PathBuf> {
    match mode {
        Workspace::InPlace => Ok(paths.root.clone()),
        Workspace::Copy => {
            let dest = paths.run_dir(run_id).join("workspace");
            if !dest.is_dir() {
                let partial = paths.run_dir(run_id).join("workspace.partial");
                if partial.exists() {
                    std::fs::remove_dir_all(&partial)?;
                }
                copy_tree(&paths.root, &partial)?;
                // A crash mid-copy leaves only `.partial`, never a half workspace.
                std::fs::rename(&partial, &dest)?;
            }
            Ok(dest)
        }
    }
}

fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if SKIP.iter().any(|s| name == *s) {
            continue;
        }
        let kind = entry.file_type()?;
        let target = to.join(&name);
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_all_but_skipped_folders() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join(".modix")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.txt"), "a").unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        let paths = ProjectPaths::at(root);
        let ws = prepare(&paths, Workspace::Copy, "R1").unwrap();
        assert_eq!(std::fs::read_to_string(ws.join("src/a.txt")).unwrap(), "a");
        assert!(!ws.join(".git").exists());
        assert!(!ws.join(".modix").exists());
        assert_eq!(prepare(&paths, Workspace::InPlace, "R1").unwrap(), root);
    }
}
