//! The SQLite record of runs: `.modix/modix.db`.
//!
//! Every run, every workflow transition, every agent invocation (with its
//! lifecycle) and every message between states is written here, so that
//! `modix history` can audit a run and an interrupted run can be resumed.
//!
//! Layout: this file opens the database and sets its pragmas; `migrations`
//! owns the schema; `runs` creates, finds, lists and claims runs;
//! `record` writes steps and invocations; `query` reads them back.
//!
//! Concurrency model: several `modix` processes may share one project. Every
//! write happens in one `BEGIN IMMEDIATE` transaction (the write lock is taken
//! up front, so two writers never deadlock upgrading read locks), WAL lets
//! readers proceed while one writer writes, and `busy_timeout` turns lock
//! waits into short sleeps instead of "database is locked" errors.

mod migrations;
mod query;
mod record;
mod runs;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use rusqlite::{Connection, Transaction, TransactionBehavior};

pub use migrations::SCHEMA_VERSION;
pub use query::{InvocationRecord, LifecycleRecord, MessageRecord, TransitionRecord};
pub use record::{
    InvocationEnd, InvocationId, InvocationStatus, NewInvocation, NewMessage, NewTransition,
    Outcome, Step,
};
pub use runs::{MAX_CANDIDATES, NewRun, Run, RunSummary};

/// File name of the database inside `.modix/`.
pub const DB_FILE: &str = "modix.db";

/// Default wait for another process's write lock before giving up.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything that can go wrong in the store. Every message names the
/// database file, because a user with several projects needs to know which.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open run database {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "run database {path} has schema version {found}, but this modix only knows up to \
         version {known}; it was written by a newer modix (left untouched)"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("run database {path}: {what} not found")]
    NotFound { path: PathBuf, what: String },
    #[error(
        "run database {path}: run id prefix {prefix:?} is ambiguous; it matches {}",
        candidates.join(", ")
    )]
    Ambiguous {
        path: PathBuf,
        prefix: String,
        /// Up to [`MAX_CANDIDATES`] matching ids, newest first.
        candidates: Vec<String>,
    },
    #[error("run database {path}: run {run_id} changed under us: {detail}")]
    Conflict {
        path: PathBuf,
        run_id: String,
        detail: String,
    },
    #[error("run database {path}: run {run_id} is being executed by live process {pid}")]
    Busy {
        path: PathBuf,
        run_id: String,
        pid: u32,
    },
    #[error("run database {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("run database {path}: {context}: {source}")]
    Sqlite {
        path: PathBuf,
        context: &'static str,
        #[source]
        source: rusqlite::Error,
    },
}

/// How hard SQLite pushes each commit to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronous {
    /// fsync the WAL on every commit: a committed step survives power loss.
    Full,
    /// fsync only at checkpoints: a committed step survives a crash of modix
    /// but the last few may be lost on power loss (the db stays consistent).
    Normal,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// Knobs for [`Store::open_with`]; [`Store::open`] uses the defaults.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub busy_timeout: Duration,
    pub synchronous: Synchronous,
}

impl Default for StoreOptions {
    /// FULL, so "the step is recorded" means "it is on disk", even across
    /// power loss. Measured with `examples/store_sync.rs` on a virtio ext4
    /// disk: ~3.8 ms per commit with FULL vs ~0.15 ms with NORMAL (elsewhere
    /// ~0.18 vs 0.02 ms). A step costs one or two commits, which is noise
    /// next to an agent invocation that takes seconds.
    fn default() -> Self {
        StoreOptions {
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            synchronous: Synchronous::Full,
        }
    }
}

/// An open run database. One per process (or thread); not `Sync`.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    synchronous: Synchronous,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Open (creating the file if needed) and migrate the database at `path`.
    /// The parent directory must exist: `.modix/` is the caller's business.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with(path, &StoreOptions::default())
    }

    /// [`Store::open`] with explicit options.
    pub fn open_with(path: &Path, options: &StoreOptions) -> Result<Store, StoreError> {
        let open_err = |source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open(path).map_err(open_err)?;
        // First, so every later statement (even switching to WAL) waits for
        // a concurrent opener instead of failing.
        conn.busy_timeout(options.busy_timeout).map_err(open_err)?;
        let mut store = Store {
            conn,
            path: path.to_path_buf(),
            synchronous: options.synchronous,
        };
        // Refuse a newer schema before changing anything about the file.
        let version = migrations::check_not_newer(&store)?;
        store.set_pragmas(options)?;
        // Only take the exclusive lock when there is something to do, so
        // opening never waits for another process's long write.
        if version < SCHEMA_VERSION {
            migrations::migrate(&mut store)?;
        }
        Ok(store)
    }

    /// The database file this store writes to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn set_pragmas(&self, options: &StoreOptions) -> Result<(), StoreError> {
        let mode = self.enable_wal(options.busy_timeout)?;
        if !mode.eq_ignore_ascii_case("wal") {
            // E.g. a filesystem without shared memory support: still correct
            // (rollback journal), only less concurrent.
            tracing::warn!(path = %self.path.display(), %mode, "could not enable WAL");
        }
        self.conn
            .pragma_update(None, "synchronous", options.synchronous.pragma())
            .ctx(self, "setting synchronous")?;
        self.conn
            .pragma_update(None, "foreign_keys", true)
            .ctx(self, "enabling foreign keys")?;
        Ok(())
    }

    /// Switch to WAL, returning the journal mode now in force. SQLite does
    /// not call the busy handler when the switch meets a lock (two processes
    /// opening a fresh file at once), so wait here ourselves, as long as
    /// `busy_timeout` would.
    fn enable_wal(&self, timeout: Duration) -> Result<String, StoreError> {
        let deadline = Instant::now() + timeout;
        loop {
            match self
                .conn
                .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            {
                Err(e)
                    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                other => return other.ctx(self, "setting journal_mode=WAL"),
            }
        }
    }

    /// Start a write transaction that holds the write lock from the start.
    /// Runs `f` with `synchronous=NORMAL` when the store is FULL: for records
    /// that need not reach the disk on their own because the next FULL commit
    /// fsyncs the WAL, earlier frames included, in order.
    pub(crate) fn relaxed<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.synchronous != Synchronous::Full {
            return f(self);
        }
        self.conn
            .pragma_update(None, "synchronous", "NORMAL")
            .ctx(&*self, "relaxing synchronous")?;
        let result = f(self);
        let restored = self
            .conn
            .pragma_update(None, "synchronous", "FULL")
            .ctx(&*self, "restoring synchronous");
        let value = result?;
        restored?;
        Ok(value)
    }

    fn write_tx(&mut self) -> Result<(Transaction<'_>, &Path), StoreError> {
        let tx =
            Transaction::new(&mut self.conn, TransactionBehavior::Immediate).map_err(|source| {
                StoreError::Sqlite {
                    path: self.path.clone(),
                    context: "starting a write transaction",
                    source,
                }
            })?;
        Ok((tx, &self.path))
    }

    fn not_found(&self, what: String) -> StoreError {
        StoreError::NotFound {
            path: self.path.clone(),
            what,
        }
    }
}

/// Attach the db path and what we were doing to a rusqlite error.
pub(crate) trait Ctx<T> {
    fn ctx(self, at: impl AtPath, context: &'static str) -> Result<T, StoreError>;
}

impl<T> Ctx<T> for rusqlite::Result<T> {
    fn ctx(self, at: impl AtPath, context: &'static str) -> Result<T, StoreError> {
        self.map_err(|source| StoreError::Sqlite {
            path: at.db_path().to_path_buf(),
            context,
            source,
        })
    }
}

/// Something that knows which database file it is about.
pub(crate) trait AtPath {
    fn db_path(&self) -> &Path;
}

impl AtPath for &Store {
    fn db_path(&self) -> &Path {
        &self.path
    }
}

impl AtPath for &Path {
    fn db_path(&self) -> &Path {
        self
    }
}

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    /// Stopped before reaching a final state (Ctrl-C, crash); resumable.
    Interrupted,
    Succeeded,
    Failed,
}

impl RunStatus {
    /// Succeeded and Failed are final; a run in them is never resumed.
    pub fn is_terminal(self) -> bool {
        matches!(self, RunStatus::Succeeded | RunStatus::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text was not one of the known values of a status-like column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownValue {
    pub kind: &'static str,
    pub value: String,
}

impl FromStr for RunStatus {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "running" => RunStatus::Running,
            "interrupted" => RunStatus::Interrupted,
            "succeeded" => RunStatus::Succeeded,
            "failed" => RunStatus::Failed,
            _ => {
                return Err(UnknownValue {
                    kind: "run status",
                    value: s.to_owned(),
                });
            }
        })
    }
}

/// `ToSql`/`FromSql` for enums stored as their `as_str()` text.
macro_rules! text_enum_sql {
    ($ty:ty) => {
        impl rusqlite::ToSql for $ty {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(rusqlite::types::ToSqlOutput::from(self.as_str()))
            }
        }
        impl rusqlite::types::FromSql for $ty {
            fn column_result(
                value: rusqlite::types::ValueRef<'_>,
            ) -> rusqlite::types::FromSqlResult<Self> {
                value
                    .as_str()?
                    .parse()
                    .map_err(|e| rusqlite::types::FromSqlError::Other(Box::new(e)))
            }
        }
    };
}
pub(crate) use text_enum_sql;

text_enum_sql!(RunStatus);

/// Now, as stored: RFC 3339 UTC with millisecond precision.
pub(crate) fn now() -> String {
    format!("{:.3}", jiff::Timestamp::now())
}

/// Milliseconds from `start` to `end` (both as stored), if both parse and
/// `end` is not before `start`.
pub(crate) fn millis_between(start: &str, end: &str) -> Option<u64> {
    let start: jiff::Timestamp = start.parse().ok()?;
    let end: jiff::Timestamp = end.parse().ok()?;
    let ms = end.as_millisecond().checked_sub(start.as_millisecond())?;
    u64::try_from(ms).ok()
}

/// Stored integers are i64; clamp instead of panicking on absurd inputs.
pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
