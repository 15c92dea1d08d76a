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

mod blobs;
mod checkpoint;
mod context;
mod controls;
mod durable;
mod fork;
mod migrations;
mod package;
mod query;
mod record;
mod runs;
mod tx;
mod usage;
mod vfs;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::shell::Redactor;

pub use context::{NOT_OUTPUTS, RunTail};
pub use controls::{Control, ControlKind};
pub use durable::Landing;
pub use migrations::SCHEMA_VERSION;
pub use package::{Quote, Quotes};
pub use query::{MessageRecord, Stops, TransitionRecord};
pub use record::{InvocationStatus, NewInvocation, NewMessage, NewTransition, ProcessIds, Step};
pub use runs::{NewRun, Run};
pub use usage::RunUsage;

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
    #[error(
        "run database {path} has schema version {found}, from an older modix; it is brought \
         up to date by a command that writes to it, which this one does not"
    )]
    NeedsMigration { path: PathBuf, found: i64 },
    #[error("run database {path}: {what} not found")]
    NotFound { path: PathBuf, what: String },
    /// No run's id is or starts with what the user typed.
    #[error("no run matches `{prefix}`")]
    UnknownRun { prefix: String },
    #[error("run {run_id} has no invocation {n}")]
    UnknownInvocation { run_id: String, n: u32 },
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
    /// The run moved on between a command's checks and its claim on it:
    /// another process answered, resumed or stopped it meanwhile.
    #[error("run {run_id} changed while this command got ready: it is now {now}")]
    Changed { run_id: String, now: String },
    #[error("run database {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    /// The file the store opened is no longer at its path: what was
    /// written since went to a file nobody can open again.
    #[error(
        "run database {path} was removed or replaced while this run went on: what the run \
         recorded went with the file modix had open, and cannot be read again"
    )]
    Gone { path: PathBuf },
    /// The write-ahead log could not be synced: a commit may not be on disk.
    #[error("run database log {path}: cannot make a commit durable: {source}")]
    Sync {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("run database {path}: {context}: {source}")]
    Sqlite {
        path: PathBuf,
        context: &'static str,
        #[source]
        source: rusqlite::Error,
    },
}

/// An open run database. One per process (or thread); not `Sync`.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// Every text written passes through it: redaction is a property of
    /// the store's boundary, not of each caller.
    redactor: Redactor,
    /// Blobs this store wrote or found, by hash (see `blobs`).
    blob_ids: blobs::Known,
    /// How its commits reach the disk (and who copies its log back).
    syncing: durable::Syncing,
    /// Its last step of a run (see `record`).
    last_step: Option<record::LastStep>,
    /// The database file's device and inode when opened (see `still_here`).
    identity: Option<(u64, u64)>,
}

impl Drop for Store {
    /// The checkpoint thread's connection closes first, so that this one is
    /// the last and SQLite checkpoints the log as it closes (and keeps it,
    /// started over if it is long: see `durable`).
    fn drop(&mut self) {
        if let Some(c) = self.syncing.checkpoints() {
            c.stop();
            if c.log_frames() > durable::REWIND_FRAMES {
                durable::rewind_log(&self.conn);
            }
        }
    }
}

/// A write transaction with what every write needs: the path for errors and
/// the redactor for every text.
pub(crate) struct Writer<'a> {
    tx: tx::Tx<'a>,
    path: &'a Path,
    redactor: &'a Redactor,
    /// Blob ids known committed, and those this transaction found or added
    /// (known only once it commits).
    blob_ids: &'a mut blobs::Known,
    new_blob_ids: std::cell::RefCell<Vec<(blobs::Hash, i64)>>,
    syncing: &'a durable::Syncing,
}

impl Writer<'_> {
    /// `text` with secrets replaced.
    fn text<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        self.redactor.redact(text)
    }

    /// A JSON value as stored: its strings redacted, serialised.
    fn json(&self, value: &impl serde::Serialize) -> Result<String, StoreError> {
        let encode = |e: serde_json::Error| StoreError::Invalid {
            path: self.path.to_path_buf(),
            message: format!("cannot encode JSON: {e}"),
        };
        let value = serde_json::to_value(value).map_err(encode)?;
        self.json_value(&value)
    }

    /// [`Writer::json`] for a JSON value (no copy of it unless a string in
    /// it is redacted).
    fn json_value(&self, value: &serde_json::Value) -> Result<String, StoreError> {
        self.encode(&self.redactor.redact_json(value))
    }

    /// A JSON value serialised as it is (already redacted).
    fn encode(&self, value: &serde_json::Value) -> Result<String, StoreError> {
        encode_json(self.path, value)
    }

    /// Commits, durably when this returns.
    fn commit(self, context: &'static str) -> Result<(), StoreError> {
        let syncing = self.syncing;
        self.commit_only(context)?;
        syncing.now()
    }

    /// Commits, the commit on its way to the disk (see `durable`).
    fn commit_landing(self, context: &'static str) -> Result<Landing, StoreError> {
        let syncing = self.syncing;
        self.commit_only(context)?;
        syncing.start()
    }

    fn commit_only(self, context: &'static str) -> Result<(), StoreError> {
        self.tx.commit().ctx(self.path, context)?;
        self.blob_ids.learn(self.new_blob_ids.into_inner());
        Ok(())
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// The database and the files SQLite keeps beside it are regular files, or
/// absent: SQLite would wait forever for a FIFO to be written, and fail
/// obscurely on a directory or a device.
fn files_are_files(path: &Path) -> Result<(), StoreError> {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let file = PathBuf::from(file);
        let Ok(meta) = std::fs::metadata(&file) else {
            continue;
        };
        if let Some(kind) = crate::config::confine::kind_of(&meta.file_type()) {
            let what = match suffix {
                "" => "it".to_owned(),
                _ => format!("its `{suffix}` file {}", file.display()),
            };
            return Err(StoreError::Invalid {
                path: path.to_path_buf(),
                message: format!(
                    "{what} is {kind}, not a file; move it out of the way (without the \
                     database modix starts a new record)"
                ),
            });
        }
    }
    Ok(())
}

/// A file's device and inode, if it is there.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

impl Store {
    /// Whether the database file is still the one opened: one removed or
    /// replaced behind modix's back (SQLite goes on writing to the file it
    /// has open) is [`StoreError::Gone`], so a run never reports a record
    /// that nobody can read.
    pub fn still_here(&self) -> Result<(), StoreError> {
        match self.identity {
            Some(was) if identity(&self.path) != Some(was) => Err(StoreError::Gone {
                path: self.path.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Open (creating the file if needed) and migrate the database at `path`.
    /// The parent directory must exist: `.modix/` is the caller's business.
    ///
    /// A write is on disk when its call returns, even across power loss;
    /// a step, before anything depends on it (see `durable`).
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        files_are_files(path)?;
        let open_err = |source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        };
        let conn = vfs::open(path).map_err(open_err)?;
        // First, so every later statement (even switching to WAL) waits for
        // a concurrent opener instead of failing.
        conn.busy_timeout(DEFAULT_BUSY_TIMEOUT).map_err(open_err)?;
        let mut store = Store {
            conn,
            path: path.to_path_buf(),
            redactor: Redactor::default(),
            blob_ids: Default::default(),
            syncing: durable::Syncing::InCommit,
            last_step: None,
            identity: identity(path),
        };
        // Refuse a newer schema before changing anything about the file.
        let version = migrations::check_not_newer(&store)?;
        let wal = store.set_pragmas()?;
        // Only take the exclusive lock when there is something to do, so
        // opening never waits for another process's long write.
        if version < SCHEMA_VERSION {
            migrations::migrate(&mut store)?;
        }
        if wal {
            store
                .conn
                .pragma_update(None, "synchronous", "NORMAL")
                .ctx(&store, "setting synchronous")?;
            let checkpoints = checkpoint::Checkpoints::install(&mut store.conn, path)
                .ctx(&store, "setting up checkpoints")?;
            durable::keep_log(&store.conn);
            store.syncing = durable::Syncing::log(path, checkpoints);
        }
        Ok(store)
    }

    /// Open for reading only — auditing must work where modix may not write
    /// (a read-only checkout, another user's project): no migration, no
    /// pragma that writes. When SQLite cannot share the WAL's index there
    /// (no write access to the folder), the file is read as immutable.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        use rusqlite::OpenFlags;
        files_are_files(path)?;
        let open = |uri: String| {
            let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI;
            let conn = Connection::open_with_flags(uri, flags)?;
            conn.busy_timeout(DEFAULT_BUSY_TIMEOUT)?;
            // Opening is lazy: a first read shows whether it can be read.
            conn.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))?;
            Ok::<_, rusqlite::Error>(conn)
        };
        let uri = |extra: &str| format!("file:{}?mode=ro{extra}", uri_path(path));
        let conn = open(uri(""))
            .or_else(|_| open(uri("&immutable=1")))
            .map_err(|source| StoreError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        let store = Store {
            conn,
            path: path.to_path_buf(),
            redactor: Redactor::default(),
            blob_ids: Default::default(),
            syncing: durable::Syncing::InCommit,
            last_step: None,
            identity: None,
        };
        store.keep_plans()?;
        let mut version = migrations::check_not_newer(&store)?;
        // Version 0 is a database another modix is creating right now (it
        // migrates in one transaction, which readers see only once done):
        // give it a moment rather than call it out of date.
        let waited = Instant::now();
        while version == 0 && waited.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(25));
            version = migrations::check_not_newer(&store)?;
        }
        if version < SCHEMA_VERSION {
            return Err(StoreError::NeedsMigration {
                path: path.to_path_buf(),
                found: version,
            });
        }
        Ok(store)
    }

    /// Plans that do not depend on the values bound to them (the query
    /// planner stability guarantee). Without it SQLite 3.54 marks nearly
    /// every `col = ?` statement to be re-planned whenever a parameter is
    /// bound again, and rusqlite's statement cache clears bindings when a
    /// statement goes back into it: every cached statement was parsed and
    /// planned anew at each use, a sixth of a step's CPU. No query here
    /// needs a value-dependent plan (no `LIKE ?`, no ANALYZE statistics).
    fn keep_plans(&self) -> Result<(), StoreError> {
        self.conn
            .set_db_config(
                rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
                true,
            )
            .ctx(self, "setting the query planner stability guarantee")?;
        Ok(())
    }

    /// Sets what every connection needs; whether the database is in WAL
    /// mode. Commits are `synchronous=FULL` (migrations run so); a WAL-mode
    /// store then lets modix sync its log (see `durable`).
    fn set_pragmas(&self) -> Result<bool, StoreError> {
        self.keep_plans()?;
        let mode = self.enable_wal(DEFAULT_BUSY_TIMEOUT)?;
        let wal = mode.eq_ignore_ascii_case("wal");
        if !wal {
            // E.g. a filesystem without shared memory support: still correct
            // (rollback journal), only less concurrent.
            tracing::warn!(path = %self.path.display(), %mode, "could not enable WAL");
        }
        self.conn
            .pragma_update(None, "synchronous", "FULL")
            .ctx(self, "setting synchronous")?;
        self.conn
            .pragma_update(None, "foreign_keys", true)
            .ctx(self, "enabling foreign keys")?;
        Ok(wal)
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

    /// Redact with `redactor` (the run's secrets) from now on; the default
    /// redacts well-known key shapes only.
    pub fn with_redactor(mut self, redactor: Redactor) -> Self {
        self.redactor = redactor;
        self
    }

    /// Start a write transaction that holds the write lock from the start.
    fn write_tx(&mut self) -> Result<Writer<'_>, StoreError> {
        let tx = tx::Tx::immediate(&mut self.conn)
            .ctx(self.path.as_path(), "starting a write transaction")?;
        Ok(Writer {
            tx,
            path: &self.path,
            redactor: &self.redactor,
            blob_ids: &mut self.blob_ids,
            new_blob_ids: Default::default(),
            syncing: &self.syncing,
        })
    }

    fn unknown_run(&self, prefix: &str) -> StoreError {
        StoreError::UnknownRun {
            prefix: prefix.to_owned(),
        }
    }
}

/// A JSON value serialised as it is (already redacted), for the database
/// at `path`.
fn encode_json(path: &Path, value: &serde_json::Value) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Invalid {
        path: path.to_path_buf(),
        message: format!("cannot encode JSON: {e}"),
    })
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

/// Where a run stands. The one place that says which statuses are final.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    serde::Serialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum RunStatus {
    Running,
    /// At a human gate, waiting for `modix approve`/`reject`/`answer`.
    Waiting,
    /// Stopped before reaching a final state (Ctrl-C, crash); resumable.
    Interrupted,
    /// Stopped on request (`modix stop`); resumable.
    Stopped,
    Succeeded,
    Failed,
}

impl RunStatus {
    /// Succeeded and Failed are final; a run in them is never resumed.
    pub fn is_terminal(self) -> bool {
        matches!(self, RunStatus::Succeeded | RunStatus::Failed)
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// `ToSql`/`FromSql` for enums stored as their `as_str()` text.
macro_rules! text_enum_sql {
    ($ty:ty) => {
        impl rusqlite::ToSql for $ty {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                let text: &'static str = self.into();
                Ok(rusqlite::types::ToSqlOutput::from(text))
            }
        }
        impl rusqlite::types::FromSql for $ty {
            fn column_result(
                value: rusqlite::types::ValueRef<'_>,
            ) -> rusqlite::types::FromSqlResult<Self> {
                let text = value.as_str()?;
                text.parse().map_err(|_| {
                    rusqlite::types::FromSqlError::Other(
                        format!("unknown {} {text:?}", stringify!($ty)).into(),
                    )
                })
            }
        }
    };
}
pub(crate) use text_enum_sql;

text_enum_sql!(RunStatus);
text_enum_sql!(crate::fsm::Outcome);

/// A path as the file part of an SQLite URI (`?` and `#` would end it).
fn uri_path(path: &Path) -> String {
    path.display()
        .to_string()
        .replace('%', "%25")
        .replace('?', "%3f")
        .replace('#', "%23")
}

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
