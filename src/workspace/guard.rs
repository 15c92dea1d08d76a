//! The git dirs modix owns (a worktree or copy workspace's own repository)
//! are within the agent's reach: the workspace's `.git` link leads there, so
//! an agent's `git config filter.x.clean …`, a hook, an `info/attributes`
//! line or a `commondir` file lands in them. modix's own git commands there
//! (`add -A` when it settles a step, `diff` for the user, the `upload-pack`
//! its publishing starts) would then run what the agent planted — outside
//! the agent's process group and timeout — or record through the agent's
//! filters. So would a line added to the run's excludes file.
//!
//! The guard takes each such file as modix made it ([`Kept::take`]), and
//! before modix runs git there puts back whatever differs, naming what it
//! put back. During a run the workspace holds what it took in memory; a
//! copy beside the run's state (`<state>/guard/`), whose digest the store
//! keeps in the workspace record, serves a later process (`resume`, `diff`,
//! `apply`, `prune`) and is refused when it no longer matches the digest —
//! it is as reachable as the files it guards. Nothing of the user's is
//! touched: these files are modix's. Records without a digest (made before
//! the guard) are not guarded.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::error::{Result, WorkspaceError};

/// Files of the repository whose content decides what git runs or reads,
/// kept as modix wrote them (absent ones stay absent).
const KEPT: &[&str] = &[
    "config",
    "info/attributes",
    "info/exclude",
    "objects/info/alternates",
    "shallow",
];

/// Names that must not exist in a repository of modix's: hooks, a
/// per-worktree config, a `commondir` (which would make git use another
/// repository), grafts and remote alternates.
const ABSENT: &[&str] = &[
    "hooks",
    "config.worktree",
    "commondir",
    "info/grafts",
    "objects/info/http-alternates",
];

/// The run's excludes file in its state folder (`core.excludesFile` of
/// modix's `add -A`): a line there would hide a file from the record.
const EXCLUDE: &str = "exclude";

/// What the guard keeps: each guarded file's bytes as modix made them
/// (`None`: absent), and the repository whose files they are.
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    git_dir: PathBuf,
    files: Vec<(PathBuf, String, Option<Vec<u8>>)>,
}

impl Kept {
    /// Takes the guarded files of `git_dir` and the run's excludes file as
    /// they are now, and writes the copy a later process loads.
    pub(crate) fn take(git_dir: &Path, state_dir: &Path) -> Result<Kept> {
        let mut files = Vec::new();
        for (path, name) in guarded(git_dir, state_dir) {
            let bytes = read_regular(&path)?;
            files.push((path, name, bytes));
        }
        let kept = Kept {
            git_dir: git_dir.to_path_buf(),
            files,
        };
        let dir = state_dir.join("guard");
        std::fs::create_dir_all(&dir).map_err(|e| WorkspaceError::io("create", &dir, e))?;
        for (_, name, bytes) in &kept.files {
            if let Some(bytes) = bytes {
                let copy = dir.join(copy_name(name));
                std::fs::write(&copy, bytes).map_err(|e| WorkspaceError::io("write", &copy, e))?;
            }
        }
        Ok(kept)
    }

    /// The copy [`take`](Self::take) wrote, if it still has `digest`.
    pub(crate) fn load(git_dir: &Path, state_dir: &Path, digest: &str) -> Result<Kept> {
        let dir = state_dir.join("guard");
        let mut files = Vec::new();
        for (path, name) in guarded(git_dir, state_dir) {
            let bytes = read_regular(&dir.join(copy_name(&name)))?;
            files.push((path, name, bytes));
        }
        let kept = Kept {
            git_dir: git_dir.to_path_buf(),
            files,
        };
        if kept.digest() != digest {
            return Err(WorkspaceError::Tampered { path: dir });
        }
        Ok(kept)
    }

    /// A SHA-256 over every guarded file's name and content.
    pub(crate) fn digest(&self) -> String {
        let mut h = Sha256::new();
        for (_, name, bytes) in &self.files {
            h.update(name.as_bytes());
            match bytes {
                Some(b) => {
                    h.update([1]);
                    h.update((b.len() as u64).to_le_bytes());
                    h.update(b);
                }
                None => h.update([0]),
            }
        }
        super::lock::hex(&h.finalize())
    }

    /// Puts back what differs from what was taken, and removes what must
    /// not exist; one line per file put back, for the step's record.
    pub(crate) fn restore(&self) -> Result<Vec<String>> {
        let mut put_back = Vec::new();
        for (path, name, want) in &self.files {
            if read_regular_if(path, want.as_ref().map(Vec::len))?.as_ref() == want.as_ref()
                && (want.is_some() || path.symlink_metadata().is_err())
            {
                continue;
            }
            remove(path)?;
            if let Some(bytes) = want {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(|e| WorkspaceError::io("create", parent, e))?;
                }
                std::fs::write(path, bytes).map_err(|e| WorkspaceError::io("write", path, e))?;
            }
            put_back.push(format!("{name} (changed)"));
        }
        for name in ABSENT {
            let path = self.git_dir.join(name);
            if path.symlink_metadata().is_ok() {
                remove(&path)?;
                put_back.push(format!("{name} (made by the agent, removed)"));
            }
        }
        Ok(put_back)
    }
}

impl Kept {
    /// Removes the lock files git left in the repository — at its top and
    /// under `refs/` — and `<state>/index.lock`: an agent killed in the
    /// middle of its own `git commit` (its timeout) leaves `index.lock`,
    /// and modix's next git there would fail on it. Only for the workspace
    /// that runs the step (whose agent is gone, and whose modix runs no
    /// other git there): never from a command reading a run from its record,
    /// which could take the lock of a git a live run is running. One line
    /// per lock removed.
    pub(crate) fn clear_stale_locks(&self, state_dir: &Path) -> Result<Vec<String>> {
        let mut locks = vec![state_dir.join("index.lock")];
        let mut dirs = vec![self.git_dir.clone(), self.git_dir.join("refs")];
        while let Some(dir) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let path = e.path();
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                if is_dir && path.starts_with(self.git_dir.join("refs")) {
                    dirs.push(path);
                } else if !is_dir && path.extension().is_some_and(|x| x == "lock") {
                    locks.push(path);
                }
            }
        }
        let mut removed = Vec::new();
        for lock in locks {
            if lock.symlink_metadata().is_ok() {
                remove(&lock)?;
                removed.push(
                    lock.strip_prefix(&self.git_dir)
                        .unwrap_or(&lock)
                        .display()
                        .to_string(),
                );
            }
        }
        Ok(removed)
    }
}

/// Every path the guard watches, for the settle's stat snapshot: a change to
/// one of them sends the settle to git, which puts it back first.
pub(crate) fn watched(git_dir: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    KEPT.iter().chain(ABSENT).map(|n| git_dir.join(n))
}

/// Loads the record's kept copy and puts back what differs: for the
/// commands that run git on a run's own repository from a record (`diff`,
/// `apply`, `prune`). Nothing for a record without a digest.
pub(crate) fn restore_for(record: &super::WorkspaceRecord) -> Result<()> {
    if let (Some(digest), Some(gd)) = (&record.guard, &record.git_dir) {
        Kept::load(gd, &record.state_dir, digest)?.restore()?;
    }
    Ok(())
}

/// The note a step's record carries when the guard put something back.
pub(crate) fn note(put_back: &[String]) -> Option<String> {
    (!put_back.is_empty()).then(|| {
        format!(
            "the agent changed the workspace's own git settings ({}); put back before modix ran git there, so nothing it planted ran",
            put_back.join(", ")
        )
    })
}

/// The guarded files: path, and the name the notes and the copy use.
fn guarded(git_dir: &Path, state_dir: &Path) -> Vec<(PathBuf, String)> {
    KEPT.iter()
        .map(|n| (git_dir.join(n), (*n).to_owned()))
        .chain(std::iter::once((
            state_dir.join(EXCLUDE),
            "modix's exclude file".to_owned(),
        )))
        .collect()
}

fn copy_name(name: &str) -> String {
    name.replace(['/', ' ', '\''], "-")
}

/// A regular file's bytes; `None` when absent or not a regular file.
fn read_regular(path: &Path) -> Result<Option<Vec<u8>>> {
    read_regular_if(path, None)
}

/// [`read_regular`], reading only a file of `len` bytes when given (a FIFO
/// is never opened, a huge file never read): otherwise `None`.
fn read_regular_if(path: &Path, len: Option<usize>) -> Result<Option<Vec<u8>>> {
    let Ok(meta) = path.symlink_metadata() else {
        return Ok(None);
    };
    if !meta.is_file() || len.is_some_and(|n| meta.len() != n as u64) {
        return Ok(None);
    }
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(WorkspaceError::io("read", path, e)),
    }
}

pub(super) fn remove(path: &Path) -> Result<()> {
    let Ok(meta) = path.symlink_metadata() else {
        return Ok(());
    };
    let removed = if meta.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    removed.map_err(|e| WorkspaceError::io("remove", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let (gd, state) = (tmp.path().join("git"), tmp.path().join("state"));
        std::fs::create_dir_all(gd.join("info")).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(gd.join("config"), "[core]\n\tbare = false\n").unwrap();
        std::fs::write(state.join("exclude"), "# modix\n").unwrap();
        (tmp, gd, state)
    }

    #[test]
    fn what_the_agent_changed_is_put_back_and_named() {
        let (_tmp, gd, state) = setup();
        let kept = Kept::take(&gd, &state).unwrap();
        assert!(kept.restore().unwrap().is_empty());

        std::fs::write(gd.join("config"), "[filter \"x\"]\n\tclean = evil\n").unwrap();
        std::fs::write(gd.join("info/attributes"), "* filter=x\n").unwrap();
        std::fs::create_dir_all(gd.join("hooks")).unwrap();
        std::fs::write(gd.join("hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(gd.join("commondir"), "/elsewhere\n").unwrap();
        std::fs::write(state.join("exclude"), "# modix\nshadow/\n").unwrap();
        let put = kept.restore().unwrap();
        assert_eq!(
            put,
            [
                "config (changed)",
                "info/attributes (changed)",
                "modix's exclude file (changed)",
                "hooks (made by the agent, removed)",
                "commondir (made by the agent, removed)"
            ]
        );
        assert_eq!(
            std::fs::read_to_string(gd.join("config")).unwrap(),
            "[core]\n\tbare = false\n"
        );
        assert_eq!(
            std::fs::read_to_string(state.join("exclude")).unwrap(),
            "# modix\n"
        );
        assert!(!gd.join("info/attributes").exists());
        assert!(!gd.join("hooks").exists());
        assert!(kept.restore().unwrap().is_empty());
        assert!(note(&put).unwrap().contains("config (changed)"));
    }

    #[test]
    fn a_file_replaced_by_a_folder_or_link_is_put_back() {
        let (_tmp, gd, state) = setup();
        let kept = Kept::take(&gd, &state).unwrap();
        std::fs::remove_file(gd.join("config")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", gd.join("config")).unwrap();
        assert_eq!(kept.restore().unwrap(), ["config (changed)"]);
        assert!(gd.join("config").symlink_metadata().unwrap().is_file());
        std::fs::remove_file(gd.join("config")).unwrap();
        std::fs::create_dir(gd.join("config")).unwrap();
        assert_eq!(kept.restore().unwrap(), ["config (changed)"]);
        // An absent file made a FIFO is removed, never opened.
        nix::unistd::mkfifo(&gd.join("shallow"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(kept.restore().unwrap(), ["shallow (changed)"]);
        assert!(!gd.join("shallow").exists());
    }

    #[test]
    fn the_copy_a_later_process_loads_is_refused_once_changed() {
        let (_tmp, gd, state) = setup();
        let digest = Kept::take(&gd, &state).unwrap().digest();
        let loaded = Kept::load(&gd, &state, &digest).unwrap();
        assert_eq!(loaded.digest(), digest);
        // The agent plants its filter in the copy as well as in the config.
        std::fs::write(
            state.join("guard/config"),
            "[filter \"x\"]\n\tclean = evil\n",
        )
        .unwrap();
        let err = Kept::load(&gd, &state, &digest).unwrap_err();
        assert!(matches!(err, WorkspaceError::Tampered { .. }), "{err:?}");
    }
}
