//! How a commit reaches the disk.
//!
//! In WAL mode SQLite commits with `synchronous=NORMAL`: the transaction's
//! frames are appended to the write-ahead log, and SQLite syncs the log only
//! before a checkpoint copies it into the database (which keeps the file
//! consistent across power loss, as its documentation says). modix makes
//! each commit durable itself, with one `fdatasync` of the log:
//!
//! - every write at once, before its call returns — what `synchronous=FULL`
//!   did inside the commit;
//! - a step's commit ([`Landing`]) is started at the commit (the kernel is
//!   asked to write the frames out) and waited for before anything depends
//!   on it: the next agent, an event, `state.json`, the end of the run. The
//!   engine prepares the next step's prompt and context meanwhile, which is
//!   work the step's fsync no longer waits behind.
//!
//! One `fdatasync` covers every frame the log holds, so a later sync makes
//! an earlier commit durable too. Another process may read a step in the
//! moment between its commit and its sync; a power loss then would take the
//! step away from the disk but not from what that reader saw — never from
//! what this run did next.
//!
//! A durable commit that left the log long starts the store's checkpoint
//! (`checkpoint`): after the sync, never before, as nothing else may act on
//! a step before it is on disk.
//!
//! When the log cannot be used (no WAL mode: a filesystem without shared
//! memory), commits stay `synchronous=FULL` and a landing has nothing to
//! wait for.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::StoreError;
use super::checkpoint::Checkpoints;

/// Where a store's commits are made durable.
#[derive(Debug)]
pub(super) enum Durability {
    /// SQLite syncs in the commit (`synchronous=FULL`).
    InCommit,
    /// modix syncs the write-ahead log after the commit.
    Log(Log),
}

/// The write-ahead log, opened at the first commit that needs it: by then
/// this connection has read the database in WAL mode and holds its shared
/// lock, so no other connection can delete the log (SQLite deletes it only
/// on a close that gets the exclusive lock) while this store is open; the
/// path stays this file.
#[derive(Debug)]
pub(super) struct Log {
    path: PathBuf,
    file: OnceLock<Arc<File>>,
    /// Started once a commit that made one due is durable.
    checkpoints: Checkpoints,
}

impl Durability {
    pub(super) fn log(db: &Path, checkpoints: Checkpoints) -> Self {
        let mut path = db.as_os_str().to_owned();
        path.push("-wal");
        Durability::Log(Log {
            path: path.into(),
            file: OnceLock::new(),
            checkpoints,
        })
    }

    /// After a commit: durable when this returns.
    pub(super) fn now(&self) -> Result<(), StoreError> {
        let Some((file, path)) = self.file()? else {
            return Ok(());
        };
        file.sync_data().map_err(|e| sync_error(&path, e))?;
        if let Some(c) = self.checkpoints() {
            c.kick();
        }
        Ok(())
    }

    /// After a commit: the frames on their way to the disk, durable once
    /// the landing is waited for (or dropped).
    pub(super) fn start(&self) -> Result<Landing, StoreError> {
        let log = self.file()?;
        if let Some((file, _)) = &log {
            write_out(file);
        }
        let kick = self.checkpoints().filter(|c| c.due()).cloned();
        Ok(Landing { log, kick })
    }

    /// Who copies the log back into the database (none without a log).
    pub(super) fn checkpoints(&self) -> Option<&Checkpoints> {
        match self {
            Durability::Log(log) => Some(&log.checkpoints),
            Durability::InCommit => None,
        }
    }

    fn file(&self) -> Result<Option<(Arc<File>, PathBuf)>, StoreError> {
        let Durability::Log(log) = self else {
            return Ok(None);
        };
        let file = match log.file.get() {
            Some(f) => Arc::clone(f),
            None => {
                let f = File::open(&log.path).map_err(|e| sync_error(&log.path, e))?;
                Arc::clone(log.file.get_or_init(|| Arc::new(f)))
            }
        };
        Ok(Some((file, log.path.clone())))
    }
}

/// A commit whose frames are on their way to the disk.
#[must_use = "a commit is durable only once its landing is waited for"]
#[derive(Debug)]
pub struct Landing {
    log: Option<(Arc<File>, PathBuf)>,
    /// The checkpoint this commit made due, started once it is durable.
    kick: Option<Checkpoints>,
}

impl Landing {
    /// Returns once the commit is on disk.
    pub fn wait(mut self) -> Result<(), StoreError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<(), StoreError> {
        if let Some((file, path)) = self.log.take() {
            file.sync_data().map_err(|e| sync_error(&path, e))?;
        }
        if let Some(checkpoints) = self.kick.take() {
            checkpoints.kick();
        }
        Ok(())
    }
}

impl Drop for Landing {
    /// Never left unsynced, even on a path that forgot it (or an error's);
    /// such a path has no one to report a failure to.
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            tracing::error!("{e}");
        }
    }
}

fn sync_error(log: &Path, source: std::io::Error) -> StoreError {
    StoreError::Sync {
        path: log.to_path_buf(),
        source,
    }
}

/// Asks the kernel to start writing the log's dirty pages now, without
/// waiting: the `fdatasync` that follows then finds them written or under
/// way. Only a hint: durability comes from that `fdatasync`, so a refusal
/// (a seccomp filter, another kernel) changes nothing.
#[cfg(target_os = "linux")]
fn write_out(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for as long as `file` is borrowed, and
    // the call reads or writes no memory of this process.
    unsafe {
        nix::libc::sync_file_range(file.as_raw_fd(), 0, 0, nix::libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn write_out(_: &File) {}
