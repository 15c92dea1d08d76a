//! The git dirs modix owns (a worktree or copy workspace's own repository)
//! are within the agent's reach: the workspace's `.git` link leads there, so
//! an agent's `git config filter.x.clean …`, a hook, an `info/attributes`
//! line or a `commondir` file lands in them. modix's own git commands there
//! (`add -A` when it settles a step, `diff` for the user) would then run
//! what the agent planted — outside the agent's process group and timeout —
//! or record through the agent's filters.
//!
//! The guard keeps, beside the run's state, a copy of each such file as
//! modix made it, and before modix runs git there puts back whatever the
//! agent changed, naming what it put back. Nothing of the user's is touched:
//! these files are modix's. Records without a kept copy (made by an older
//! modix) are not guarded.

use std::path::{Path, PathBuf};

use super::error::{Result, WorkspaceError};

/// Files whose content decides what git runs or reads in a repository, kept
/// as modix wrote them (absent ones stay absent).
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

/// Where the copies are kept: `<state>/guard`.
fn kept_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("guard")
}

fn kept_name(name: &str) -> String {
    name.replace('/', "--")
}

/// Every path the guard watches, for the settle's stat snapshot: a change to
/// one of them sends the settle to git, which puts it back first.
pub(crate) fn watched(git_dir: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    KEPT.iter().chain(ABSENT).map(|n| git_dir.join(n))
}

/// Keeps a copy of the guarded files of `git_dir` as they are now.
pub(crate) fn keep(git_dir: &Path, state_dir: &Path) -> Result<()> {
    let dir = kept_dir(state_dir);
    std::fs::create_dir_all(&dir).map_err(|e| WorkspaceError::io("create", &dir, e))?;
    for name in KEPT {
        let from = git_dir.join(name);
        if from.is_file() {
            let to = dir.join(kept_name(name));
            std::fs::copy(&from, &to).map_err(|e| WorkspaceError::io("copy", &from, e))?;
        }
    }
    Ok(())
}

/// Puts back what changed in `git_dir` since [`keep`]; one line per file
/// put back, for the step's record. Nothing when no copy was kept.
pub(crate) fn restore(git_dir: &Path, state_dir: &Path) -> Result<Vec<String>> {
    let dir = kept_dir(state_dir);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut put_back = Vec::new();
    for name in KEPT {
        let path = git_dir.join(name);
        let want = read(&dir.join(kept_name(name)))?;
        let meta = path.symlink_metadata().ok();
        // Read only a regular file of the kept size: a FIFO is never opened,
        // a huge file never read.
        let same = match (&meta, &want) {
            (None, None) => true,
            (Some(m), Some(w)) if m.is_file() && m.len() == w.len() as u64 => {
                read(&path)?.as_ref() == Some(w)
            }
            _ => false,
        };
        if same {
            continue;
        }
        remove(&path)?;
        if let Some(bytes) = want {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| WorkspaceError::io("create", parent, e))?;
            }
            std::fs::write(&path, bytes).map_err(|e| WorkspaceError::io("write", &path, e))?;
        }
        put_back.push(format!("{name} (changed)"));
    }
    for name in ABSENT {
        let path = git_dir.join(name);
        if path.symlink_metadata().is_ok() {
            remove(&path)?;
            put_back.push(format!("{name} (made by the agent, removed)"));
        }
    }
    Ok(put_back)
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

fn read(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(WorkspaceError::io("read", path, e)),
    }
}

fn remove(path: &Path) -> Result<()> {
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

    #[test]
    fn what_the_agent_changed_is_put_back_and_named() {
        let tmp = tempfile::tempdir().unwrap();
        let (gd, state) = (tmp.path().join("git"), tmp.path().join("state"));
        std::fs::create_dir_all(gd.join("info")).unwrap();
        std::fs::write(gd.join("config"), "[core]\n\tbare = false\n").unwrap();
        keep(&gd, &state).unwrap();
        assert!(restore(&gd, &state).unwrap().is_empty());

        std::fs::write(gd.join("config"), "[filter \"x\"]\n\tclean = evil\n").unwrap();
        std::fs::write(gd.join("info/attributes"), "* filter=x\n").unwrap();
        std::fs::create_dir_all(gd.join("hooks")).unwrap();
        std::fs::write(gd.join("hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(gd.join("commondir"), "/elsewhere\n").unwrap();
        let put = restore(&gd, &state).unwrap();
        assert_eq!(
            put,
            [
                "config (changed)",
                "info/attributes (changed)",
                "hooks (made by the agent, removed)",
                "commondir (made by the agent, removed)"
            ]
        );
        assert_eq!(
            std::fs::read_to_string(gd.join("config")).unwrap(),
            "[core]\n\tbare = false\n"
        );
        assert!(!gd.join("info/attributes").exists());
        assert!(!gd.join("hooks").exists());
        assert!(restore(&gd, &state).unwrap().is_empty());
        assert!(note(&put).unwrap().contains("config (changed)"));
    }

    #[test]
    fn a_file_replaced_by_a_folder_or_link_is_put_back() {
        let tmp = tempfile::tempdir().unwrap();
        let (gd, state) = (tmp.path().join("git"), tmp.path().join("state"));
        std::fs::create_dir_all(&gd).unwrap();
        std::fs::write(gd.join("config"), "mine").unwrap();
        keep(&gd, &state).unwrap();
        std::fs::remove_file(gd.join("config")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", gd.join("config")).unwrap();
        assert_eq!(restore(&gd, &state).unwrap(), ["config (changed)"]);
        assert!(gd.join("config").symlink_metadata().unwrap().is_file());
        std::fs::remove_file(gd.join("config")).unwrap();
        std::fs::create_dir(gd.join("config")).unwrap();
        assert_eq!(restore(&gd, &state).unwrap(), ["config (changed)"]);
        assert_eq!(std::fs::read(gd.join("config")).unwrap(), b"mine");
    }

    #[test]
    fn nothing_is_guarded_without_a_kept_copy() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("git/hooks")).unwrap();
        assert!(
            restore(&tmp.path().join("git"), &tmp.path().join("state"))
                .unwrap()
                .is_empty()
        );
        assert!(tmp.path().join("git/hooks").exists());
    }
}
