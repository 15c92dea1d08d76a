//! The write-ahead log's writes, gathered into one per commit.
//!
//! SQLite appends a commit to the log frame by frame, and each frame with
//! two writes: its 24-byte header, then its page. A step's commit touches
//! ~7 pages (trivial) to ~17 (realistic), so 14 to 34 `pwrite`s, each a trip
//! through the kernel's write path for bytes that sit side by side in the
//! file, on the step's path (inside its transaction). Each frame also
//! straddles two filesystem blocks (a frame is 24 bytes longer than a
//! page), and a write that covers part of a block whose page is not in the
//! page cache reads that block from the disk first: where memory is tight
//! (a container's memory limit, an agent building beside the run), that
//! was up to two synchronous reads per frame. Gathered, a 200-step trivial
//! run makes 299 `pwrite`s instead of 3,049, a commit has two partial
//! blocks rather than two per frame, and a step under page-cache pressure
//! is a quarter shorter; with memory to spare the step is as long as
//! before (docs/performance.md, fourteenth round).
//!
//! This module registers a VFS, [`NAME`], that is the platform's default
//! one for every file but a log. For a log it holds a write that continues
//! the one before it in memory, and hands the run of them to the file as
//! one write as soon as the commit's last frame is whole: the frame whose
//! header carries the database's size after the commit (SQLite's commit
//! mark, written only on a commit's last frame). That is before SQLite
//! publishes the commit in the log's shared index, so another connection
//! never finds a published frame missing from the file, and before the
//! commit returns, so modix's own `fdatasync` of the log (`durable`) covers
//! it.
//!
//! Anything else SQLite does with the log (read, sync, size, truncate,
//! file control, close) first writes what is held, and a write elsewhere in
//! the file (a frame rewritten in place, a checksum fixed up) is written
//! through as it comes, after what was held. All of that happens while the
//! connection holds the log's write lock, so nothing it writes can land on
//! another connection's frames.
//!
//! What a transaction wrote before its commit (pages spilled from a full
//! cache) is held until then. A transaction rolled back instead leaves
//! frames nobody will read, and once it has let go of the lock another
//! connection may commit its own frames at those places in the log: so
//! they are dropped, never written, by the connection's rollback hook
//! ([`open`] installs it) and at the log's close. A crash loses only what a
//! crash before the `pwrite` would have: frames of a commit that had not
//! returned, which SQLite's recovery ignores without their commit mark.

use std::ffi::{CStr, c_int, c_void};
use std::path::Path;
use std::ptr;
use std::sync::OnceLock;

use rusqlite::{Connection, ffi};

/// The VFS's name, for `Connection::open_with_flags_and_vfs`.
pub(super) const NAME: &CStr = c"modix";

/// Bytes of a frame's header in the log.
const FRAME_HEADER: usize = 24;

/// The most bytes held, and so written at once: SQLite's unix VFS writes at
/// most this many in one call (it masks a length with it).
const MAX_HELD: usize = 0x1ffff;

/// The VFS this one wraps (the platform's default), once registered.
struct Base(*mut ffi::sqlite3_vfs);

// SAFETY: SQLite's VFS objects are immutable once registered and are meant
// to be used from any thread.
unsafe impl Send for Base {}
unsafe impl Sync for Base {}

static BASE: OnceLock<Option<Base>> = OnceLock::new();

/// Registers the VFS (once per process); `None` when there is no default
/// VFS to wrap, and connections then open with SQLite's own.
fn name() -> Option<&'static CStr> {
    BASE.get_or_init(register).as_ref().map(|_| NAME)
}

/// Opens (creating it if needed) the database at `path` through this VFS,
/// with the rollback hook that drops what a rolled-back transaction left
/// held; with SQLite's own VFS when this one could not be registered.
pub(super) fn open(path: &Path) -> rusqlite::Result<Connection> {
    let Some(name) = name() else {
        return Connection::open(path);
    };
    let mut conn = Connection::open_with_flags_and_vfs(path, rusqlite::OpenFlags::default(), name)?;
    // SAFETY: the handle is only used by the hook, which the connection
    // owns and drops before it closes.
    let handle = Handle(unsafe { conn.handle() });
    conn.rollback_hook(Some(move || handle.drop_held()))?;
    Ok(conn)
}

/// A connection's handle, for its own rollback hook.
struct Handle(*mut ffi::sqlite3);

// SAFETY: the hook runs on whichever thread uses the connection, inside
// that use; the handle is never used anywhere else.
unsafe impl Send for Handle {}

impl Handle {
    /// Drops what the connection's log holds: called when its transaction
    /// has been rolled back, so it is frames nobody will read.
    fn drop_held(&self) {
        // SAFETY: the connection is open: its hook is running.
        if let Some(log) = unsafe { log_of(self.0) } {
            log.drop_held();
        }
    }
}

/// `sqlite3_file_control` on the connection's main database: `op` with
/// `arg`, SQLite's result code.
///
/// # Safety
/// `db` is an open connection, and `arg` is what `op` reads or writes.
pub(super) unsafe fn control_main(db: *mut ffi::sqlite3, op: c_int, arg: *mut c_void) -> c_int {
    unsafe { ffi::sqlite3_file_control(db, c"main".as_ptr(), op, arg) }
}

/// The connection's log, when it is open through this VFS.
///
/// # Safety
/// As for [`log`]: `db` is open, and the log is not in use meanwhile.
unsafe fn log_of<'a>(db: *mut ffi::sqlite3) -> Option<&'a mut LogFile> {
    let mut file: *mut ffi::sqlite3_file = ptr::null_mut();
    // SAFETY: the call only reads which file object the log is, into
    // `file`; a file object with these methods is a `LogFile` opened by
    // `open_file` and, the connection being open, not closed.
    unsafe {
        let rc = control_main(
            db,
            ffi::SQLITE_FCNTL_JOURNAL_POINTER,
            (&raw mut file).cast(),
        );
        (rc == ffi::SQLITE_OK && !file.is_null() && ptr::eq((*file).pMethods, &LOG_METHODS))
            .then(|| log(file))
    }
}

fn register() -> Option<Base> {
    // SAFETY: finding the default VFS has no precondition; the copy made
    // of it is leaked, so it lives as long as SQLite may use it.
    unsafe {
        let base = ffi::sqlite3_vfs_find(ptr::null());
        if base.is_null() {
            return None;
        }
        let mut vfs = *base;
        vfs.zName = NAME.as_ptr();
        vfs.pNext = ptr::null_mut();
        vfs.szOsFile = c_int::try_from(INNER_AT)
            .ok()?
            .checked_add((*base).szOsFile)?;
        vfs.xOpen = Some(open_file);
        let vfs = Box::leak(Box::new(vfs));
        if ffi::sqlite3_vfs_register(vfs, 0) != ffi::SQLITE_OK {
            tracing::debug!("the log's writes will not be gathered: no VFS");
            return None;
        }
        Some(Base(base))
    }
}

/// The wrapped VFS (always there: `open_file` is reached only through the
/// registered VFS).
fn base() -> Option<*mut ffi::sqlite3_vfs> {
    match BASE.get() {
        Some(Some(Base(vfs))) => Some(*vfs),
        _ => None,
    }
}

/// A log file: SQLite's file object first (so a pointer to one is a pointer
/// to the other), then what is held, then — at [`INNER_AT`] — the wrapped
/// VFS's own file object.
#[repr(C)]
struct LogFile {
    file: ffi::sqlite3_file,
    inner: *mut ffi::sqlite3_file,
    /// Bytes written by SQLite, not yet by the file, starting at `at`.
    held: Vec<u8>,
    at: i64,
    /// Where SQLite's last write to this file ended (held or not): a write
    /// starting there continues it.
    end: i64,
    /// The held bytes end with a commit's last frame header; its page, the
    /// next write, completes the commit.
    commit: bool,
}

/// Offset of the wrapped file object, aligned as SQLite aligns its own.
const INNER_AT: usize = std::mem::size_of::<LogFile>().next_multiple_of(8);

unsafe extern "C" fn open_file(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let Some(base) = base() else {
        return ffi::SQLITE_CANTOPEN;
    };
    // SAFETY: SQLite hands a file object of this VFS's `szOsFile` bytes,
    // which hold a `LogFile` and the base's own object after it; the base's
    // `xOpen` is called as SQLite would call it.
    unsafe {
        let Some(base_open) = (*base).xOpen else {
            return ffi::SQLITE_CANTOPEN;
        };
        if flags & ffi::SQLITE_OPEN_WAL == 0 {
            // Not a log: the base's own object, at the start, untouched.
            return base_open(base, name, file, flags, out_flags);
        }
        let inner = file.cast::<u8>().add(INNER_AT).cast::<ffi::sqlite3_file>();
        (*file).pMethods = ptr::null();
        let rc = base_open(base, name, inner, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        ptr::write(
            file.cast::<LogFile>(),
            LogFile {
                file: ffi::sqlite3_file {
                    pMethods: &LOG_METHODS,
                },
                inner,
                held: Vec::new(),
                at: 0,
                end: -1,
                commit: false,
            },
        );
        ffi::SQLITE_OK
    }
}

impl LogFile {
    /// The wrapped file's methods.
    fn methods(&self) -> &ffi::sqlite3_io_methods {
        // SAFETY: the base's open succeeded, so its object has methods for
        // as long as it is open, which outlasts every call on this one.
        unsafe { &*(*self.inner).pMethods }
    }

    /// Forgets what is held: frames of a transaction that ended without
    /// its commit.
    fn drop_held(&mut self) {
        self.held.clear();
        self.commit = false;
    }

    /// Writes what is held, as one write.
    fn flush(&mut self) -> c_int {
        self.commit = false;
        if self.held.is_empty() {
            return ffi::SQLITE_OK;
        }
        let rc = self.write_through(&self.held, self.at);
        // Written or failed, it is no longer held: SQLite rolls back a
        // transaction whose write failed and writes its frames again.
        self.held.clear();
        rc
    }

    fn write(&mut self, data: &[u8], at: i64) -> c_int {
        let continues = at == self.end;
        let completes = std::mem::take(&mut self.commit) && continues;
        self.end = at + data.len() as i64;
        let rc = if continues && data.len() <= MAX_HELD {
            if self.held.len() + data.len() > MAX_HELD {
                // A long run of frames (a large transaction): written out
                // in parts, each as large as one write may be.
                let rc = self.flush();
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
            }
            if self.held.is_empty() {
                self.at = at;
            }
            self.held.extend_from_slice(data);
            if completes {
                self.flush()
            } else {
                ffi::SQLITE_OK
            }
        } else {
            // Somewhere else in the file: what is held first, then this.
            match self.flush() {
                ffi::SQLITE_OK => self.write_through(data, at),
                rc => rc,
            }
        };
        // A commit's last frame header: the page after it completes the
        // commit, whether this header was held or written through.
        self.commit = rc == ffi::SQLITE_OK && data.len() == FRAME_HEADER && data[4..8] != [0; 4];
        rc
    }

    /// One write by the wrapped file.
    fn write_through(&self, data: &[u8], at: i64) -> c_int {
        #[cfg(test)]
        tests::WRITES.set(tests::WRITES.get() + 1);
        match (self.methods().xWrite, c_int::try_from(data.len())) {
            // SAFETY: `data` is `len` bytes, read during the call.
            (Some(write), Ok(len)) => unsafe { write(self.inner, data.as_ptr().cast(), len, at) },
            _ => ffi::SQLITE_IOERR_WRITE,
        }
    }
}

/// The `LogFile` behind SQLite's file pointer.
///
/// # Safety
/// `file` is a log opened by [`open_file`] and not yet closed, and SQLite calls
/// a file's methods one at a time (a connection is used by one thread at a
/// time, and a log belongs to one connection).
unsafe fn log<'a>(file: *mut ffi::sqlite3_file) -> &'a mut LogFile {
    unsafe { &mut *file.cast::<LogFile>() }
}

/// A method that writes what is held, then calls the wrapped file's own.
macro_rules! after_flush {
    ($name:ident, $field:ident ( $($arg:ident : $ty:ty),* )) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file, $($arg: $ty),*) -> c_int {
            // SAFETY: see `log`; the wrapped method gets its own object.
            unsafe {
                let log = log(file);
                let rc = log.flush();
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
                match log.methods().$field {
                    Some(method) => method(log.inner, $($arg),*),
                    None => ffi::SQLITE_IOERR,
                }
            }
        }
    };
}

/// A method passed to the wrapped file as it is (`$none` when it has none:
/// SQLite uses the shared-memory and mapping ones on a database, never on
/// a log).
macro_rules! forward {
    ($name:ident, $field:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty, $none:expr) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file, $($arg: $ty),*) -> $ret {
            // SAFETY: see `log`; the wrapped method gets its own object.
            unsafe {
                let log = log(file);
                match log.methods().$field {
                    Some(method) => method(log.inner, $($arg),*),
                    None => $none,
                }
            }
        }
    };
}

after_flush!(read, xRead(buf: *mut c_void, amount: c_int, at: i64));
after_flush!(truncate, xTruncate(size: i64));
after_flush!(sync, xSync(flags: c_int));
after_flush!(file_size, xFileSize(size: *mut i64));
after_flush!(file_control, xFileControl(op: c_int, arg: *mut c_void));
const IOERR: c_int = ffi::SQLITE_IOERR;
forward!(lock, xLock(level: c_int) -> c_int, IOERR);
forward!(unlock, xUnlock(level: c_int) -> c_int, IOERR);
forward!(check_reserved_lock, xCheckReservedLock(out: *mut c_int) -> c_int, IOERR);
forward!(sector_size, xSectorSize() -> c_int, 4096);
forward!(device_characteristics, xDeviceCharacteristics() -> c_int, 0);
forward!(shm_map, xShmMap(page: c_int, size: c_int, extend: c_int, out: *mut *mut c_void) -> c_int, IOERR);
forward!(shm_lock, xShmLock(offset: c_int, n: c_int, flags: c_int) -> c_int, IOERR);
forward!(shm_barrier, xShmBarrier() -> (), ());
forward!(shm_unmap, xShmUnmap(delete: c_int) -> c_int, IOERR);
forward!(fetch, xFetch(at: i64, amount: c_int, out: *mut *mut c_void) -> c_int, IOERR);
forward!(unfetch, xUnfetch(at: i64, page: *mut c_void) -> c_int, IOERR);

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    at: i64,
) -> c_int {
    let Ok(len) = usize::try_from(amount) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    // SAFETY: see `log`; SQLite's buffer holds `amount` bytes for the call.
    unsafe {
        let data = std::slice::from_raw_parts(data.cast::<u8>(), len);
        log(file).write(data, at)
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: see `log`; after this call SQLite never uses the object
    // again, so the `LogFile` is dropped in place.
    unsafe {
        let log = log(file);
        // Every commit was written at its last frame; anything still held
        // is a transaction's that the closing connection rolled back.
        log.drop_held();
        let closed = match log.methods().xClose {
            Some(close) => close(log.inner),
            None => ffi::SQLITE_OK,
        };
        ptr::drop_in_place(file.cast::<LogFile>());
        (*file).pMethods = ptr::null();
        closed
    }
}

static LOG_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::path::Path;

    use rusqlite::{Connection, params};

    thread_local! {
        /// Writes the wrapped files were asked for on this thread.
        pub(super) static WRITES: Cell<usize> = const { Cell::new(0) };
    }

    /// A connection through the VFS, committing as a store does (WAL,
    /// `synchronous=NORMAL`: no sync of its own at a commit).
    fn open(path: &Path) -> Connection {
        assert!(super::name().is_some(), "the VFS is registered");
        let conn = super::open(path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, k TEXT, v TEXT);
             CREATE INDEX IF NOT EXISTS t_k ON t(k);
             CREATE TABLE IF NOT EXISTS u (id INTEGER PRIMARY KEY, v TEXT);
             CREATE TABLE IF NOT EXISTS one (id INTEGER PRIMARY KEY);",
        )
        .unwrap();
        conn
    }

    /// The rows a new opener finds in a copy of the database and its log
    /// taken now, as a crash now would leave them (no shared index: the
    /// copy recovers from the log alone), its integrity checked.
    fn rows_after_crash(dir: &Path) -> i64 {
        let copy = tempfile::tempdir().unwrap();
        for name in ["db", "db-wal"] {
            let from = dir.join(name);
            if from.exists() {
                std::fs::copy(&from, copy.path().join(name)).unwrap();
            }
        }
        whole(&Connection::open(copy.path().join("db")).unwrap())
    }

    /// The rows (as `count`) of a database SQLite finds intact.
    fn whole(conn: &Connection) -> i64 {
        let ok: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
        count(conn)
    }

    /// Begins a transaction whose pages spill from a cache of four to a
    /// log emptied first, fewer frames than one write holds: all of them
    /// held when it returns. With nothing in the log, a rollback reads the
    /// pages it puts back from the database file, so nothing of the log's
    /// (which would write what is held first).
    fn spill(conn: &Connection) {
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        conn.pragma_update(None, "cache_size", 4).unwrap();
        conn.execute_batch("BEGIN").unwrap();
        for i in 0..30 {
            conn.execute(
                "INSERT INTO t (k, v) VALUES (?1, ?2)",
                params![i, "z".repeat(900)],
            )
            .unwrap();
        }
        assert!(held(conn) > 0, "spilled frames are held");
    }

    /// Rows of `t` and of `one`.
    fn count(conn: &Connection) -> i64 {
        let sql = "SELECT (SELECT count(*) FROM t) + (SELECT count(*) FROM one)";
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    /// Bytes the connection's log holds, not yet written.
    fn held(conn: &Connection) -> usize {
        // SAFETY: the connection is open and this thread's.
        unsafe { super::log_of(conn.handle()) }
            .expect("a log of this VFS")
            .held
            .len()
    }

    /// A commit of one frame: a row in a table of one page.
    fn insert_one(conn: &Connection) {
        conn.execute("INSERT INTO one DEFAULT VALUES", []).unwrap();
    }

    fn insert(conn: &Connection, n: i64, size: usize) {
        let tx = conn.unchecked_transaction().unwrap();
        for i in 0..n {
            let k = format!("{:016x}", (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            tx.execute(
                "INSERT INTO t (k, v) VALUES (?1, ?2)",
                params![k, "x".repeat(size)],
            )
            .unwrap();
            tx.execute("INSERT INTO u (v) VALUES (?1)", params!["y".repeat(size)])
                .unwrap();
        }
        tx.commit().unwrap();
    }

    #[test]
    fn a_commit_of_many_frames_is_one_write() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("db"));
        insert(&conn, 1, 10);
        // Up to ~17 frames: a step's commit.
        for rows in [1, 3, 10] {
            WRITES.set(0);
            insert(&conn, rows, 3000);
            assert_eq!(WRITES.get(), 1, "a commit of {rows} rows of two tables");
        }
        // ~60 frames (~250 KB): in parts of at most 128 KiB.
        WRITES.set(0);
        insert(&conn, 40, 3000);
        assert!((2..=3).contains(&WRITES.get()), "{} writes", WRITES.get());
    }

    #[test]
    fn every_commit_is_in_the_file_when_it_returns() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("db"));
        // Another connection, SQLite's own VFS, reading as each commit
        // lands: it is handed the new frames by the shared index at once.
        let reader = Connection::open(dir.path().join("db")).unwrap();
        // And a second writer, so each one's next frame is not where its
        // own last write ended.
        let other = open(&dir.path().join("db"));
        let mut expected = 0;
        let shapes = [
            (1, 10),
            (5, 100),
            (30, 3000),
            (1, 5000),
            (2, 0),
            (1, 1),
            (3, 3000),
        ];
        for (i, (rows, size)) in shapes.into_iter().enumerate() {
            let writer = if i % 3 == 2 { &other } else { &conn };
            insert(writer, rows, size);
            expected += rows;
            assert_eq!(count(&reader), expected);
            assert_eq!(rows_after_crash(dir.path()), expected);
            for writer in [writer, &other, &conn] {
                insert_one(writer);
                expected += 1;
                assert_eq!(count(&reader), expected);
                assert_eq!(rows_after_crash(dir.path()), expected);
            }
        }
    }

    #[test]
    fn a_transaction_larger_than_the_cache_spills_rewrites_and_rolls_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("db"));
        insert(&conn, 3, 10);
        // A cache of a few pages: the transaction's pages spill to the log
        // before its commit, and pages spilled are changed again, so the
        // commit rewrites frames in place and their checksums after them.
        conn.pragma_update(None, "cache_size", 4).unwrap();
        let big = |commit: bool| {
            let tx = conn.unchecked_transaction().unwrap();
            for i in 0..200 {
                tx.execute(
                    "INSERT INTO t (k, v) VALUES (?1, ?2)",
                    params![format!("{i:03}"), "z".repeat(900)],
                )
                .unwrap();
                tx.execute("UPDATE u SET v = ?1 WHERE id = 1", params![i.to_string()])
                    .unwrap();
            }
            if commit { tx.commit() } else { tx.rollback() }.unwrap();
        };
        big(false);
        assert_eq!(rows_after_crash(dir.path()), 3);
        big(true);
        assert_eq!(rows_after_crash(dir.path()), 203);
        insert(&conn, 1, 10);
        assert_eq!(rows_after_crash(dir.path()), 204);
    }

    /// Frames a transaction spilled and then rolled back are not written
    /// later: another connection may have committed its own frames at those
    /// places in the log meanwhile.
    #[test]
    fn a_rolled_back_transactions_frames_never_overwrite_anothers_commit() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("db"));
        insert(&conn, 3, 10);
        spill(&conn);
        conn.execute_batch("ROLLBACK").unwrap();
        assert_eq!(held(&conn), 0, "the rolled-back frames are dropped");
        // Another writer commits where the spilled frames were going.
        let other = Connection::open(dir.path().join("db")).unwrap();
        for _ in 0..3 {
            let tx = other.unchecked_transaction().unwrap();
            for i in 0..20 {
                tx.execute(
                    "INSERT INTO u (v) VALUES (?1)",
                    params![format!("{i}").repeat(500)],
                )
                .unwrap();
            }
            tx.execute("INSERT INTO one DEFAULT VALUES", []).unwrap();
            tx.commit().unwrap();
        }
        // The first connection reads (and would write what it held).
        assert_eq!(count(&conn), 6);
        insert_one(&conn);
        assert_eq!(count(&other), 7);
        assert_eq!(rows_after_crash(dir.path()), 7);
        drop(conn);
        assert_eq!(rows_after_crash(dir.path()), 7);
        assert_eq!(whole(&other), 7);
    }

    /// A connection closed in the middle of a transaction (its spilled
    /// frames held) leaves the log as its last commit left it.
    #[test]
    fn a_connection_closed_inside_a_transaction_leaves_its_last_commit() {
        let dir = tempfile::tempdir().unwrap();
        let other = open(&dir.path().join("db"));
        insert(&other, 2, 10);
        let conn = open(&dir.path().join("db"));
        spill(&conn);
        drop(conn);
        insert(&other, 3, 100);
        insert_one(&other);
        assert_eq!(count(&other), 6);
        assert_eq!(rows_after_crash(dir.path()), 6);
    }

    /// Four connections on four threads write at once, each transaction
    /// large or small, spilling or not, committed or rolled back at
    /// random, with checkpoints between: every committed row is there, no
    /// rolled-back one, and the file is whole, read directly and from a
    /// copy taken as a crash would leave it.
    #[test]
    fn writers_at_once_committing_and_rolling_back_keep_every_commit() {
        let dir = tempfile::tempdir().unwrap();
        drop(open(&dir.path().join("db")));
        let committed = std::sync::atomic::AtomicI64::new(0);
        std::thread::scope(|scope| {
            for writer in 0..4u64 {
                let (path, committed) = (dir.path().join("db"), &committed);
                scope.spawn(move || {
                    let conn = open(&path);
                    conn.busy_timeout(std::time::Duration::from_secs(30))
                        .unwrap();
                    conn.pragma_update(None, "cache_size", 4).unwrap();
                    let mut rng = writer * 7919 + 1;
                    let mut next = move |n: u64| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng % n
                    };
                    for _ in 0..40 {
                        let rows = [1, 2, 25][next(3) as usize];
                        let tx = rusqlite::Transaction::new_unchecked(
                            &conn,
                            rusqlite::TransactionBehavior::Immediate,
                        )
                        .unwrap();
                        for _ in 0..rows {
                            let v = "w".repeat(100 + next(1500) as usize);
                            tx.execute(
                                "INSERT INTO t (k, v) VALUES (?1, ?2)",
                                params![writer as i64, v],
                            )
                            .unwrap();
                        }
                        if next(3) == 0 {
                            tx.rollback().unwrap();
                        } else {
                            tx.commit().unwrap();
                            committed.fetch_add(rows as i64, std::sync::atomic::Ordering::SeqCst);
                        }
                        if next(4) == 0 {
                            let _ =
                                conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
                        }
                    }
                });
            }
        });
        let expected = committed.load(std::sync::atomic::Ordering::SeqCst);
        assert!(expected > 0);
        assert_eq!(rows_after_crash(dir.path()), expected);
        let conn = Connection::open(dir.path().join("db")).unwrap();
        assert_eq!(whole(&conn), expected);
    }

    #[test]
    fn a_log_started_over_after_a_checkpoint_is_recovered_whole() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("db"));
        let mut expected = 0;
        for round in 0..3 {
            insert(&conn, 4, 2000);
            expected += 4;
            conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()))
                .unwrap();
            // The next commit writes the log's header and frames from its start.
            insert(&conn, 1 + round, 100);
            expected += 1 + round;
            assert_eq!(rows_after_crash(dir.path()), expected);
        }
        drop(conn);
        assert_eq!(rows_after_crash(dir.path()), expected);
    }
}
