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
//! - a step's commit ([`Landing`]) is synced before anything depends on
//!   it: the next agent, an event, `state.json`, the end of the run. At the
//!   commit the kernel is asked to start writing the log out
//!   ([`Landing::begin`]), the engine prepares the next step's prompt and
//!   context while the disk writes, and the wait's `fdatasync` is left
//!   with the disk's cache flush. With `durability: pipelined` the wait
//!   comes once the next agent has started.
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
//! The log outlives the store's close ([`keep_log`]). SQLite deletes it at
//! the last close by default, so every run started a new one and appended
//! to it until its first checkpoint let it start over: each commit of a
//! run's first cycle made the file longer, and a sync of a file whose size
//! changed writes its inode too, one more write and wait on the disk per
//! step (~60 µs here; docs/performance.md, thirteenth round). A kept log
//! is written over from its start instead. So that the next opener does
//! not read back a whole cycle to recover it, a closing store that leaves
//! it long starts it over, holding one frame ([`rewind_log`]).
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
pub(super) enum Syncing {
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

impl Syncing {
    pub(super) fn log(db: &Path, checkpoints: Checkpoints) -> Self {
        let mut path = db.as_os_str().to_owned();
        path.push("-wal");
        Syncing::Log(Log {
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

    /// After a commit: durable once the landing is waited for (or dropped).
    pub(super) fn start(&self) -> Result<Landing, StoreError> {
        let log = self.file()?;
        let kick = self.checkpoints().filter(|c| c.due()).cloned();
        Ok(Landing {
            log,
            kick,
            begun: false,
        })
    }

    /// Who copies the log back into the database (none without a log).
    pub(super) fn checkpoints(&self) -> Option<&Checkpoints> {
        match self {
            Syncing::Log(log) => Some(&log.checkpoints),
            Syncing::InCommit => None,
        }
    }

    fn file(&self) -> Result<Option<(Arc<File>, PathBuf)>, StoreError> {
        let Syncing::Log(log) = self else {
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

/// Keeps `conn`'s log when it closes last (`SQLITE_FCNTL_PERSIST_WAL`):
/// SQLite still copies the log into the database first, so the database
/// file alone is whole after a clean close, as before; the log file stays,
/// to be written over by the next run. A refusal changes nothing but that.
pub(super) fn keep_log(conn: &rusqlite::Connection) {
    let mut on: std::os::raw::c_int = 1;
    // SAFETY: the handle is this open connection's; the call reads and
    // writes only `on`, which outlives it.
    let rc = unsafe {
        super::vfs::control_main(
            conn.handle(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&raw mut on).cast(),
        )
    };
    if rc != rusqlite::ffi::SQLITE_OK {
        tracing::debug!("the log will not be kept: code {rc}");
    }
}

/// A log this long (frames) when a store closes is started over by it
/// ([`rewind_log`]); a shorter one is quick to recover as it is (~100 µs),
/// so a command that wrote a step or two closes without the extra write.
pub(super) const REWIND_FRAMES: std::os::raw::c_int = 64;

/// Before a store's last close: the log emptied into the database and
/// started over with one small write (the schema version, set to itself),
/// so the kept log holds one valid frame by its header, and the next
/// opener's recovery reads that one rather than the whole last cycle
/// (older frames carry the old salt and end the scan). Without waiting:
/// when another connection reads or writes, it is not the last close, and
/// this is left to whoever closes last.
pub(super) fn rewind_log(conn: &rusqlite::Connection) {
    let rewind = || -> rusqlite::Result<bool> {
        conn.busy_timeout(std::time::Duration::ZERO)?;
        let (busy, log, copied): (i64, i64, i64) =
            conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        if busy != 0 || log != copied {
            return Ok(false);
        }
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        conn.pragma_update(None, "user_version", version)?;
        Ok(true)
    };
    match rewind() {
        Ok(true) => {}
        Ok(false) => tracing::debug!("log in use: left for the last close"),
        Err(e) => tracing::debug!("log not rewound: {e}"),
    }
}

/// A commit whose frames are on their way to the disk.
#[must_use = "a commit is durable only once its landing is waited for"]
#[derive(Debug)]
pub struct Landing {
    log: Option<(Arc<File>, PathBuf)>,
    /// The checkpoint this commit made due, started once it is durable.
    kick: Option<Checkpoints>,
    /// Whether the log's write-out was started ([`Landing::begin`]).
    begun: bool,
}

impl Landing {
    /// Asks the kernel to start writing the commit's frames out now, for a
    /// landing waited for before the next agent starts: the disk writes
    /// while the engine prepares that agent, and the wait's `fdatasync` finds
    /// the frames written or under way. On this thread, not a syncer's: a
    /// thread woken for the sync started it only once the engine slept or
    /// an idle virtual CPU woke (~60–120 µs later; docs/performance.md,
    /// twenty-fifth round). One waited for beside the next agent's start
    /// (`durability: pipelined`) goes without: its sync runs while that
    /// agent's process loads.
    pub fn begin(&mut self) {
        if let (Some((file, _)), false) = (&self.log, self.begun) {
            write_out(file);
            self.begun = true;
        }
    }

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

#[cfg(test)]
pub(super) mod tests {
    use super::super::{DB_FILE, Store};

    /// Frames of a log file valid by its header's salt, as a recovery
    /// counts them (their checksums aside).
    pub(in crate::store) fn valid_frames(wal: &[u8]) -> usize {
        let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        if wal.len() < 32 {
            return 0;
        }
        let page = be(&wal[8..12]) as usize;
        let salt = (be(&wal[16..20]), be(&wal[20..24]));
        let mut at = 32;
        let mut n = 0;
        while at + 24 + page <= wal.len() && (be(&wal[at + 8..]), be(&wal[at + 12..])) == salt {
            n += 1;
            at += 24 + page;
        }
        n
    }

    fn commit(store: &mut Store, rows: usize) {
        for _ in 0..rows {
            let w = store.write_tx().unwrap();
            w.tx.execute("INSERT INTO t (x) VALUES (?1)", ["x".repeat(16 * 1024)])
                .unwrap();
            w.commit_landing("a test commit").unwrap().wait().unwrap();
        }
    }

    /// A store at `path` with a table `t` to write to.
    fn store_with_table(path: &std::path::Path) -> Store {
        let store = Store::open(path).unwrap();
        store
            .conn
            .execute_batch("CREATE TABLE IF NOT EXISTS t (x TEXT)")
            .unwrap();
        store
    }

    fn rows(conn: &rusqlite::Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    }

    fn wal_len(dir: &tempfile::TempDir) -> u64 {
        std::fs::metadata(dir.path().join(format!("{DB_FILE}-wal"))).map_or(0, |m| m.len())
    }

    /// A closed store keeps its log, holding one frame by its header; the
    /// next store writes over it without growing it, reading every row;
    /// a reader, modix's or a plain one, sees them all, and the database
    /// file alone (copied without its log) is whole.
    #[test]
    fn the_log_outlives_the_close_and_is_written_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE);
        let mut store = store_with_table(&path);
        commit(&mut store, 40);
        drop(store);
        let kept = wal_len(&dir);
        assert!(kept > 40 * 16 * 1024, "{kept}");
        let wal = std::fs::read(dir.path().join(format!("{DB_FILE}-wal"))).unwrap();
        assert_eq!(valid_frames(&wal), 1);

        let copy = tempfile::tempdir().unwrap();
        std::fs::copy(&path, copy.path().join(DB_FILE)).unwrap();
        let alone = rusqlite::Connection::open(copy.path().join(DB_FILE)).unwrap();
        assert_eq!(rows(&alone), 40, "the database file alone");

        let mut store = store_with_table(&path);
        commit(&mut store, 20);
        assert_eq!(
            wal_len(&dir),
            kept,
            "the log grew instead of being written over"
        );
        assert_eq!(rows(&Store::open_read_only(&path).unwrap().conn), 60);
        drop(store);
        // The first to open it again is a reader, as `modix history` is.
        assert_eq!(rows(&Store::open_read_only(&path).unwrap().conn), 60);
        let plain = rusqlite::Connection::open(&path).unwrap();
        assert_eq!(rows(&plain), 60);
        let check: String = plain
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }

    /// A store that wrote little leaves the log as it is: the next opener
    /// recovers those few frames, and reads every row.
    #[test]
    fn a_short_log_is_kept_without_the_extra_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE);
        let mut store = store_with_table(&path);
        let w = store.write_tx().unwrap();
        w.tx.execute("INSERT INTO t (x) VALUES ('a')", []).unwrap();
        w.commit_landing("a test commit").unwrap().wait().unwrap();
        drop(store);
        let wal = std::fs::read(dir.path().join(format!("{DB_FILE}-wal"))).unwrap();
        let frames = valid_frames(&wal);
        assert!(
            (2..=super::REWIND_FRAMES as usize).contains(&frames),
            "{frames}"
        );
        assert_eq!(rows(&Store::open_read_only(&path).unwrap().conn), 1);
    }

    /// A store closing while another connection reads is not the last:
    /// it leaves the log to that one, without waiting for it.
    #[test]
    fn a_close_beside_a_reader_does_not_wait_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE);
        let mut store = store_with_table(&path);
        commit(&mut store, 40);
        let reader = rusqlite::Connection::open(&path).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        rows(&reader);
        let started = std::time::Instant::now();
        drop(store);
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        reader.execute_batch("COMMIT").unwrap();
        assert_eq!(rows(&reader), 40);
    }
}
