//! Deferred durability for the run that drives a workflow: each commit's
//! fsync of the write-ahead log runs on the helper thread while the main
//! thread prepares the next step, and is waited for before anything may
//! depend on the step being on disk.
//!
//! `synchronous=FULL` makes SQLite fsync the WAL inside every commit: the
//! main thread waits ~0.1–0.2 ms for the disk, then builds the next step's
//! context, prompt and command line. Here the connection commits with
//! `synchronous=NORMAL` (frames written, index updated, no fsync) and this
//! module fsyncs the WAL right after, on another thread. The store is as
//! durable as under FULL wherever it matters:
//! - no agent starts before the step before it is on disk
//!   ([`Store::synced`] is awaited before every spawn), so what an agent
//!   does is never ahead of the record of how the run got there;
//! - the next commit waits for the last one's fsync, and so does the store's
//!   drop (a command that ends, `go` reporting a finished run);
//! - a crash of modix itself (kill -9) loses nothing either way: the
//!   frames are in the operating system's cache once the commit returns.
//!
//! What differs: another process reading the database (a `history`, a
//! concurrent run) may see a step up to one fsync before it is on disk, as
//! may the live event stream. A power cut in that window loses that one
//! step, and the agent after it has not started.
//!
//! Checkpoints are unchanged: under NORMAL, SQLite fsyncs the WAL before
//! copying it into the database and the database after.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, sync_channel};

use super::{Ctx, Store, StoreError};

/// The write-ahead log's file, and the fsync in flight, if any.
pub(super) struct Deferred {
    /// Opened at the first deferred commit (the WAL exists by then). While
    /// this connection is open SQLite never deletes or replaces the file,
    /// so the descriptor stays on the inode it writes.
    wal: Option<Arc<File>>,
    pending: Option<Receiver<std::io::Result<()>>>,
}

impl Deferred {
    /// Whether an fsync is in flight.
    #[cfg(test)]
    pub(super) fn in_flight(&self) -> bool {
        self.pending.is_some()
    }

    /// Waits for the fsync in flight; its error, if it failed.
    pub(super) fn wait(&mut self, db: &Path) -> Result<(), StoreError> {
        let Some(rx) = self.pending.take() else {
            return Ok(());
        };
        // A helper that died without answering synced nothing: sync here.
        let result = rx.recv().unwrap_or_else(|_| match &self.wal {
            Some(wal) => wal.sync_data(),
            None => Ok(()),
        });
        result.map_err(|source| StoreError::Sync {
            path: db.to_path_buf(),
            source,
        })
    }

    /// Starts the fsync of what the commit just wrote.
    pub(super) fn start(&mut self, db: &Path) -> Result<(), StoreError> {
        let sync_err = |source| StoreError::Sync {
            path: db.to_path_buf(),
            source,
        };
        let wal = match &self.wal {
            Some(wal) => Arc::clone(wal),
            None => {
                let mut name = db.as_os_str().to_owned();
                name.push("-wal");
                let wal = Arc::new(File::open(&name).map_err(sync_err)?);
                self.wal = Some(Arc::clone(&wal));
                wal
            }
        };
        let (tx, rx) = sync_channel(1);
        let theirs = Arc::clone(&wal);
        let sent = crate::background::run(Box::new(move || {
            let _ = tx.send(theirs.sync_data());
        }));
        if !sent {
            return wal.sync_data().map_err(sync_err);
        }
        self.pending = Some(rx);
        Ok(())
    }
}

impl Store {
    /// From now on, commits are made durable off the calling thread (see
    /// the module's documentation); [`Store::synced`] waits until they are.
    /// Only in WAL mode: otherwise commits stay synchronous.
    pub fn defer_sync(&mut self) -> Result<(), StoreError> {
        if self.deferred.is_some() {
            return Ok(());
        }
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .ctx(&*self, "reading journal_mode")?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Ok(());
        }
        self.conn
            .pragma_update(None, "synchronous", "NORMAL")
            .ctx(&*self, "setting synchronous")?;
        self.deferred = Some(Deferred {
            wal: None,
            pending: None,
        });
        Ok(())
    }

    /// Waits until every commit so far is on disk.
    pub fn synced(&mut self) -> Result<(), StoreError> {
        match &mut self.deferred {
            Some(d) => d.wait(&self.path),
            None => Ok(()),
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Err(e) = self.synced() {
            tracing::error!("{e}");
        }
    }
}
