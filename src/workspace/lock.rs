//! [`TreeLock`]: one live run per tree. An `flock` on a file under
//! `<modix_home>/locks/`, named by a hash of the tree's canonical path; the
//! file holds the owner's pid and run id so a refusal can name them. The
//! kernel releases the lock when the process dies, so a crash never leaves a
//! stale lock behind (the file's old text is simply overwritten).
//!
//! [`WorktreesLock`]: one `git worktree add`/`remove`/`prune` at a time on a
//! repository, among modix processes.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use sha2::{Digest, Sha256};

use super::error::{Result, WorkspaceError};

/// Held for as long as a run uses a tree; dropping it unlocks.
#[derive(Debug)]
pub struct TreeLock {
    _file: Flock<File>,
}

impl TreeLock {
    /// Locks `tree` for `run_id`, or refuses with [`WorkspaceError::Locked`]
    /// naming the holder.
    pub fn acquire(modix_home: &Path, tree: &Path, run_id: &str) -> Result<TreeLock> {
        let dir = modix_home.join("locks");
        std::fs::create_dir_all(&dir).map_err(|e| WorkspaceError::io("create", &dir, e))?;
        let canonical = tree.canonicalize().unwrap_or_else(|_| tree.to_path_buf());
        let key = hex(&Sha256::digest(canonical.as_os_str().as_encoded_bytes()))[..16].to_owned();
        let path = dir.join(format!("{key}.lock"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| WorkspaceError::io("open the lock file", &path, e))?;
        let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(f) => f,
            Err((mut file, Errno::EWOULDBLOCK)) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let field = |name: &str| {
                    text.lines()
                        .find_map(|l| l.strip_prefix(name))
                        .unwrap_or("unknown")
                        .trim()
                        .to_owned()
                };
                return Err(WorkspaceError::Locked {
                    path: canonical,
                    pid: field("pid="),
                    run_id: field("run="),
                });
            }
            Err((_, errno)) => {
                return Err(WorkspaceError::io(
                    "lock",
                    &path,
                    std::io::Error::from_raw_os_error(errno as i32),
                ));
            }
        };
        let text = format!(
            "pid={}\nrun={}\ntree={}\n",
            std::process::id(),
            run_id,
            canonical.display()
        );
        let write = (|| -> std::io::Result<()> {
            file.set_len(0)?;
            file.rewind()?;
            file.write_all(text.as_bytes())
        })();
        write.map_err(|e| WorkspaceError::io("write the lock file", &path, e))?;
        Ok(TreeLock { _file: file })
    }
}

/// Held around a `git worktree add`, `remove` or `prune` on one repository.
///
/// git does not serialise these: `git worktree add` reads every entry under
/// `<common dir>/worktrees/` (to refuse a path or branch already in use) and
/// fails — "failed to read .git/worktrees/<id>/commondir" — when it meets
/// the entry a concurrent `add` has made but not yet filled in. Runs started
/// together on one project did exactly that. So modix takes a blocking
/// `flock` on `<common dir>/modix-worktrees.lock` (in the repository, so
/// modix processes with different homes agree), only for the command.
#[derive(Debug)]
pub(crate) struct WorktreesLock {
    _file: Flock<File>,
}

impl WorktreesLock {
    /// Waits for and takes the lock of the repository whose common git
    /// directory (`git rev-parse --git-common-dir`) is `common_dir`.
    pub(crate) fn acquire(common_dir: &Path) -> Result<WorktreesLock> {
        let path = common_dir.join("modix-worktrees.lock");
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| WorkspaceError::io("open the lock file", &path, e))?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(f) => return Ok(WorktreesLock { _file: f }),
                // A signal arrived while waiting: wait again.
                Err((f, Errno::EINTR)) => file = f,
                Err((_, errno)) => {
                    return Err(WorkspaceError::io(
                        "lock",
                        &path,
                        std::io::Error::from_raw_os_error(errno as i32),
                    ));
                }
            }
        }
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_and_named_then_admitted_after_release() {
        let home = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let first = TreeLock::acquire(home.path(), tree.path(), "RUN-ONE").unwrap();
        // A separate open file description: flock refuses it even in-process.
        let err = TreeLock::acquire(home.path(), tree.path(), "RUN-TWO").unwrap_err();
        match &err {
            WorkspaceError::Locked { pid, run_id, .. } => {
                assert_eq!(pid, &std::process::id().to_string());
                assert_eq!(run_id, "RUN-ONE");
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        assert!(err.to_string().contains("RUN-ONE"), "{err}");
        drop(first);
        let _again = TreeLock::acquire(home.path(), tree.path(), "RUN-TWO").unwrap();
        let file = std::fs::read_dir(home.path().join("locks"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let text = std::fs::read_to_string(file.path()).unwrap();
        assert!(text.contains("run=RUN-TWO"), "{text}");
    }
}
