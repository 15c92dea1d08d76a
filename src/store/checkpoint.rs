//! Copying the write-ahead log into the database, mostly off the step's path.
//!
//! SQLite's automatic checkpoint runs inside the commit that takes the log
//! past 1,000 pages: that one step copies every page the last ~60 steps
//! wrote into the database file and syncs it, a few milliseconds on one
//! step in sixty (~70 µs a step on average, docs/performance.md). Here the
//! commit only notes that the log is long. Once that commit is durable —
//! when the engine goes on to start an agent and writes nothing until it
//! ends — a thread of the store's own, with its own connection, runs the
//! same `PASSIVE` checkpoint. The first commit after that pass copies what
//! was written meanwhile (a few steps' pages), itself, as SQLite would
//! have: the log is then wholly in the database and the next write starts
//! it over from its beginning, so it stays as short as before. (A
//! background pass alone would never let it start over while steps keep
//! committing.)
//!
//! Nothing about what is durable changes: a checkpoint only copies frames
//! already in the log (SQLite syncs the log before it copies and the
//! database after), and a crash at any moment of one is one SQLite
//! recovers from, as from its own. A `PASSIVE` checkpoint never waits for a
//! lock: when another connection (another run) is checkpointing, this one
//! skips its turn and a later commit asks again, as the automatic one does.
//!
//! The thread starts at the first long log (a short command never starts
//! one) and is joined when the store closes, before its connection closes,
//! so that connection is the last and SQLite copies the log as it closes.
//! Where no thread can be started, commits checkpoint themselves, and so
//! do they once the log is four times the threshold whatever the thread is
//! doing, so the log stays bounded.

use std::os::raw::c_int;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use rusqlite::wal::CheckpointMode;
use rusqlite::{Connection, OpenFlags};

/// The log length (pages) that calls for a checkpoint: SQLite's default
/// automatic checkpoint threshold.
const PAGES: c_int = 1000;

/// A log this many times [`PAGES`] long is checkpointed by its commits
/// whatever the thread is doing (held up by a slow disk, or gone): the log
/// stays bounded as SQLite's own checkpoint keeps it.
const STALLED: c_int = 4;

/// Where the log is in its cycle ([`Shared::phase`]).
const SHORT: u8 = 0;
/// Long: the thread is to copy it once the commit is durable.
const DUE: u8 = 1;
/// The thread is copying it.
const COPYING: u8 = 2;
/// The thread copied it up to where it was; the next commit finishes.
const COPIED: u8 = 3;

/// A store's checkpoints (a handle: clones share the thread).
#[derive(Debug, Clone)]
pub(super) struct Checkpoints {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    db: PathBuf,
    phase: AtomicU8,
    /// No thread could be started: commits checkpoint themselves.
    inline: AtomicBool,
    /// Passes the thread ran (for tests).
    passes: AtomicU64,
    /// The log's length (frames) after this connection's last commit.
    frames: AtomicI32,
    worker: Mutex<Option<Worker>>,
    /// Held by a test to keep the thread from starting its pass.
    #[cfg(test)]
    gate: Mutex<()>,
}

#[derive(Debug)]
struct Worker {
    wake: SyncSender<()>,
    thread: JoinHandle<()>,
}

impl Checkpoints {
    /// Takes over `conn`'s checkpoints: its commits no longer copy the
    /// whole log; they say when the thread should.
    pub(super) fn install(conn: &mut Connection, db: &Path) -> rusqlite::Result<Checkpoints> {
        let shared = Arc::new(Shared {
            db: db.to_path_buf(),
            phase: AtomicU8::new(SHORT),
            inline: AtomicBool::new(false),
            passes: AtomicU64::new(0),
            frames: AtomicI32::new(0),
            worker: Mutex::new(None),
            #[cfg(test)]
            gate: Mutex::new(()),
        });
        let hook = Arc::clone(&shared);
        conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: c_int| {
            if hook.after_commit(pages) {
                // SQLite's own: copies what it can, never waits for a lock.
                if let Err(e) = wal.checkpoint() {
                    tracing::debug!("checkpoint in a commit: {e}");
                }
            }
            Ok(())
        }))?;
        Ok(Checkpoints { shared })
    }

    /// The log's length (frames) after this connection's last commit; 0
    /// before its first.
    pub(super) fn log_frames(&self) -> c_int {
        self.shared.frames.load(Ordering::Acquire)
    }

    /// Whether the last commit left the thread a pass to run once it is
    /// durable ([`Checkpoints::kick`]).
    pub(super) fn due(&self) -> bool {
        self.shared.phase.load(Ordering::Acquire) == DUE
    }

    /// After a commit is durable: starts the pass it made due.
    pub(super) fn kick(&self) {
        let s = &self.shared;
        let swap = s
            .phase
            .compare_exchange(DUE, COPYING, Ordering::AcqRel, Ordering::Acquire);
        if swap.is_ok() && !s.ask() {
            s.inline.store(true, Ordering::Release);
            s.phase.store(SHORT, Ordering::Release);
        }
    }

    /// Ends the thread (after the pass it may be running).
    pub(super) fn stop(&self) {
        let worker = self
            .shared
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(Worker { wake, thread }) = worker {
            drop(wake);
            let _ = thread.join();
        }
    }

    #[cfg(test)]
    pub(super) fn passes(&self) -> u64 {
        self.shared.passes.load(Ordering::Acquire)
    }

    #[cfg(test)]
    pub(super) fn hold(&self) -> std::sync::MutexGuard<'_, ()> {
        self.shared.gate.lock().unwrap()
    }
}

impl Shared {
    /// What a commit that left `pages` in the log does: true when it is to
    /// checkpoint itself (the thread's pass is over, or there is no thread).
    fn after_commit(&self, pages: c_int) -> bool {
        self.frames.store(pages, Ordering::Release);
        let phase = &self.phase;
        if pages < PAGES {
            // Started over (or never long); a pass still running ends as
            // COPIED and is forgotten at the next commit.
            let _ = phase.compare_exchange(COPIED, SHORT, Ordering::AcqRel, Ordering::Acquire);
            let _ = phase.compare_exchange(DUE, SHORT, Ordering::AcqRel, Ordering::Acquire);
            return false;
        }
        if self.inline.load(Ordering::Acquire) || pages >= PAGES * STALLED {
            return true;
        }
        match phase.load(Ordering::Acquire) {
            SHORT => {
                phase.store(DUE, Ordering::Release);
                false
            }
            COPIED => {
                // If this pass cannot finish (a reader of another process
                // holds old pages), the next long log starts the cycle over.
                phase.store(SHORT, Ordering::Release);
                true
            }
            _ => false,
        }
    }

    /// Wakes the thread (starting it the first time); false when there is
    /// no thread to wake.
    fn ask(self: &Arc<Self>) -> bool {
        let mut worker = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        if worker.is_none() {
            *worker = self.start();
        }
        match worker.as_ref().map(|w| w.wake.try_send(())) {
            Some(Ok(()) | Err(TrySendError::Full(()))) => true,
            Some(Err(TrySendError::Disconnected(()))) | None => false,
        }
    }

    /// The thread and its connection, or `None` (commits then checkpoint
    /// themselves).
    fn start(self: &Arc<Self>) -> Option<Worker> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        // A connection knows the database is in WAL mode (and can
        // checkpoint it) only once it has read it.
        let conn = Connection::open_with_flags(&self.db, flags)
            .and_then(|c| {
                // For that read (a `PASSIVE` pass never waits for a lock).
                c.busy_timeout(super::DEFAULT_BUSY_TIMEOUT)?;
                c.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))?;
                Ok(c)
            })
            .map_err(|e| tracing::debug!(db = %self.db.display(), "checkpoint connection: {e}"))
            .ok()?;
        let file = std::fs::File::open(&self.db)
            .map_err(|e| tracing::debug!(db = %self.db.display(), "checkpoint sync: {e}"))
            .ok();
        let (wake, woken) = sync_channel::<()>(1);
        let shared = Arc::clone(self);
        let thread = std::thread::Builder::new()
            .name("modix-checkpoint".into())
            .spawn(move || shared.run(&conn, file.as_ref(), &woken))
            .map_err(|e| tracing::debug!("cannot start the checkpoint thread: {e}"))
            .ok()?;
        Some(Worker { wake, thread })
    }

    /// The thread: one `PASSIVE` pass per wake, until the store closes.
    ///
    /// SQLite syncs the database at the end of a pass only when the pass
    /// reached the end of the log, which a pass running beside the engine's
    /// commits rarely does: the commit that finishes would then sync all
    /// the pages this pass wrote (~1.5 ms here). So the pass syncs them
    /// itself; the finishing commit syncs only its own few.
    fn run(&self, conn: &Connection, db: Option<&std::fs::File>, woken: &Receiver<()>) {
        while woken.recv().is_ok() {
            #[cfg(test)]
            drop(self.gate.lock());
            match conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE) {
                Ok((log, copied)) => tracing::debug!(log, copied, "checkpoint"),
                // E.g. busy: another connection is checkpointing.
                Err(e) => tracing::debug!("checkpoint: {e}"),
            }
            if let Some(Err(e)) = db.map(std::fs::File::sync_data) {
                tracing::debug!("checkpoint sync: {e}");
            }
            self.passes.fetch_add(1, Ordering::AcqRel);
            let _ =
                self.phase
                    .compare_exchange(COPYING, COPIED, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::{DB_FILE, Store};

    /// One commit of `kb` KB (through the store's writer, so it is made
    /// durable and starts what it made due, as a step's commit does).
    fn commit(store: &mut Store, kb: usize) {
        let w = store.write_tx().unwrap();
        w.tx.execute("INSERT INTO t (x) VALUES (?1)", ["x".repeat(kb * 1024)])
            .unwrap();
        w.commit("a test commit").unwrap();
    }

    fn open(dir: &tempfile::TempDir) -> Store {
        let store = Store::open(&dir.path().join(DB_FILE)).unwrap();
        store.conn.execute_batch("CREATE TABLE t (x TEXT)").unwrap();
        store
    }

    fn size(path: std::path::PathBuf) -> u64 {
        std::fs::metadata(path).map_or(0, |m| m.len())
    }

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(20), "{what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_long_log_is_copied_by_the_thread_not_by_the_commit_that_made_it_long() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(&dir);
        let checkpoints = store.syncing.checkpoints().cloned().expect("a WAL store");
        let db = dir.path().join(DB_FILE);
        let before = size(db.clone());
        {
            // The thread is kept from its pass: whatever copies the log
            // now is a commit.
            let _held = checkpoints.hold();
            for _ in 0..80 {
                commit(&mut store, 64); // ~1,300 pages in all
            }
            assert_eq!(size(db.clone()), before, "a commit copied the log");
            assert_eq!(checkpoints.passes(), 0);
        }
        wait_for("the thread's pass", || checkpoints.passes() >= 1);
        assert!(size(db) > before + 4_000_000, "the pass copied the log");
    }

    #[test]
    fn a_thread_that_does_not_copy_leaves_the_commits_to_it_past_a_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(&dir);
        let checkpoints = store.syncing.checkpoints().cloned().unwrap();
        let db = dir.path().join(DB_FILE);
        let wal = dir.path().join(format!("{DB_FILE}-wal"));
        let _held = checkpoints.hold();
        // ~5,000 pages while the thread cannot copy any.
        for _ in 0..300 {
            commit(&mut store, 64);
        }
        assert_eq!(checkpoints.passes(), 0);
        assert!(size(db) > 8_000_000, "the commits copied the log");
        assert!(
            size(wal.clone()) < 24_000_000,
            "the log grew to {}",
            size(wal)
        );
    }

    #[test]
    fn the_log_starts_over_while_steps_keep_committing() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(&dir);
        let wal = dir.path().join(format!("{DB_FILE}-wal"));
        // 40 MB through a log that starts over at ~4 MB (and is bounded at
        // ~16 MB whatever happens): it must not grow by all of it.
        for _ in 0..1_000 {
            commit(&mut store, 40);
        }
        assert!(
            store.syncing.checkpoints().unwrap().passes() >= 1,
            "the thread ran no pass"
        );
        assert!(
            size(wal.clone()) < 24_000_000,
            "the log grew to {}",
            size(wal)
        );
        super::super::tests::assert_intact(&store);
    }

    /// The case a stream of commits makes by chance, made on purpose: the
    /// thread's pass cannot copy the log to its end (here a reader holds
    /// an older snapshot; there, steps commit during the pass). The commit
    /// after it copies the rest, and the log then starts over instead of
    /// growing.
    #[test]
    fn the_commit_after_an_unfinished_pass_lets_the_log_start_over() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(&dir);
        let checkpoints = store.syncing.checkpoints().cloned().unwrap();
        let wal = dir.path().join(format!("{DB_FILE}-wal"));
        let held = checkpoints.hold();
        for _ in 0..70 {
            commit(&mut store, 64); // past 1,000 pages: the pass is due
        }
        let reader = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        for _ in 0..5 {
            commit(&mut store, 64); // past the reader's snapshot
        }
        drop(held);
        wait_for("the thread's pass", || checkpoints.passes() >= 1);
        reader.execute_batch("COMMIT").unwrap();
        drop(reader);
        commit(&mut store, 1); // finishes the copy
        let before = size(wal.clone());
        for _ in 0..100 {
            commit(&mut store, 16); // ~1.6 MB, from the log's start
        }
        assert_eq!(size(wal), before, "the log grew instead of starting over");
        super::super::tests::assert_intact(&store);
    }

    #[test]
    fn closing_the_store_ends_the_thread_and_rewinds_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(&dir);
        for _ in 0..80 {
            commit(&mut store, 64);
        }
        let checkpoints = store.syncing.checkpoints().cloned().unwrap();
        wait_for("the thread's pass", || checkpoints.passes() >= 1);
        drop(store);
        // Kept, holding only the frame that started it over (`durable`).
        let wal = std::fs::read(dir.path().join(format!("{DB_FILE}-wal"))).unwrap();
        assert!(wal.len() > 4_000_000, "{}", wal.len());
        assert_eq!(super::super::durable::tests::valid_frames(&wal), 1);
        let store = Store::open(&dir.path().join(DB_FILE)).unwrap();
        super::super::tests::assert_intact(&store);
        let rows: i64 = store
            .conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 80);
    }
}
