//! The schema, versioned by `PRAGMA user_version`.
//!
//! `MIGRATIONS[i]` takes the database from version `i` to `i + 1`. All
//! pending ones run inside ONE `BEGIN EXCLUSIVE` transaction that re-reads
//! `user_version` after taking the lock: when two processes open a fresh
//! database at once, one migrates and the other, once it gets the lock, sees
//! the work done. A failed migration leaves the file as it was.
//!
//! Never edit a released migration; append a new one.

use rusqlite::{Transaction, TransactionBehavior};

use super::{Ctx, Store, StoreError};

/// Version 1: runs, their transitions, agent invocations with their
/// lifecycle, and messages between states.
///
/// STRICT tables so a wrong type is an error, not a silent coercion; CHECKs
/// on the enum-like columns and JSON columns so a bug elsewhere cannot write
/// a row `modix history` later chokes on.
const V1: &str = r#"
CREATE TABLE runs (
    id               TEXT PRIMARY KEY NOT NULL,   -- ULID: sorts by creation time
    epic             TEXT NOT NULL,
    workflow_id      TEXT NOT NULL,
    workflow_version TEXT NOT NULL,
    workflow_hash    TEXT NOT NULL,
    status           TEXT NOT NULL
                     CHECK (status IN ('running', 'interrupted', 'succeeded', 'failed')),
    status_reason    TEXT,
    current_state    TEXT NOT NULL,
    workdir          TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    ended_at         TEXT,
    owner_pid        INTEGER,                     -- process executing the run, if any
    heartbeat_at     TEXT
) STRICT;

CREATE TABLE invocations (
    id                INTEGER PRIMARY KEY,
    run_id            TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    n                 INTEGER NOT NULL CHECK (n >= 1),
    state             TEXT NOT NULL,
    agent             TEXT NOT NULL,
    attempt           INTEGER NOT NULL,
    lifecycle_fsm     TEXT NOT NULL,
    argv              TEXT NOT NULL CHECK (json_valid(argv)),
    prompt            TEXT NOT NULL,
    context           TEXT NOT NULL CHECK (json_valid(context)),
    started_at        TEXT NOT NULL,
    ended_at          TEXT,
    status            TEXT NOT NULL
                      CHECK (status IN ('running', 'completed', 'failed', 'abandoned')),
    outcome           TEXT CHECK (outcome IN
                      ('output', 'invalid_output', 'process_error', 'timeout', 'cancelled')),
    exit_code         INTEGER,
    signal            INTEGER,
    timed_out         INTEGER NOT NULL DEFAULT 0 CHECK (timed_out IN (0, 1)),
    duration_ms       INTEGER,
    stdout            TEXT NOT NULL DEFAULT '',
    stderr            TEXT NOT NULL DEFAULT '',
    stdout_bytes      INTEGER NOT NULL DEFAULT 0,
    stderr_bytes      INTEGER NOT NULL DEFAULT 0,
    parsed_output     TEXT CHECK (json_valid(parsed_output)),
    validation_errors TEXT CHECK (json_valid(validation_errors)),
    UNIQUE (run_id, n)
) STRICT;

CREATE TABLE transitions (
    run_id        TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    at            TEXT NOT NULL,
    from_state    TEXT NOT NULL,
    event         TEXT NOT NULL,
    to_state      TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    bound         INTEGER,
    agent         TEXT,
    reason        TEXT,
    redirected    INTEGER NOT NULL DEFAULT 0 CHECK (redirected IN (0, 1)),
    invocation_id INTEGER REFERENCES invocations(id),
    PRIMARY KEY (run_id, seq)
) STRICT;

CREATE TABLE invocation_transitions (
    invocation_id INTEGER NOT NULL REFERENCES invocations(id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    at            TEXT NOT NULL,
    from_state    TEXT NOT NULL,
    event         TEXT NOT NULL,
    to_state      TEXT NOT NULL,
    PRIMARY KEY (invocation_id, seq)
) STRICT;

CREATE TABLE messages (
    id      INTEGER PRIMARY KEY,
    run_id  TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,     -- the workflow transition that produced it
    kind    TEXT NOT NULL,
    state   TEXT NOT NULL,
    payload TEXT NOT NULL CHECK (json_valid(payload)),
    at      TEXT NOT NULL,
    FOREIGN KEY (run_id, seq) REFERENCES transitions(run_id, seq) ON DELETE CASCADE
) STRICT;

-- "latest message of kind K in run R" and "messages of run R in order".
CREATE INDEX messages_by_run_kind ON messages(run_id, kind, id);
-- Following the FK from transitions back to an invocation.
CREATE INDEX transitions_by_invocation ON transitions(invocation_id)
    WHERE invocation_id IS NOT NULL;
-- "runs newest first" uses the primary key: ULIDs sort by creation time.
"#;

const MIGRATIONS: &[&str] = &[V1];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

fn too_new(store: &Store, found: i64) -> StoreError {
    StoreError::TooNew {
        path: store.path.clone(),
        found,
        known: SCHEMA_VERSION,
    }
}

/// Refuse a database from a newer modix before touching it at all;
/// otherwise return its version.
pub(super) fn check_not_newer(store: &Store) -> Result<i64, StoreError> {
    let found: i64 = store
        .conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .ctx(store, "reading the schema version")?;
    if found > SCHEMA_VERSION {
        return Err(too_new(store, found));
    }
    Ok(found)
}

/// Bring the schema up to [`SCHEMA_VERSION`].
pub(super) fn migrate(store: &mut Store) -> Result<(), StoreError> {
    let path = store.path.clone();
    let path = path.as_path();
    let tx = Transaction::new(&mut store.conn, TransactionBehavior::Exclusive)
        .ctx(path, "locking the database to migrate it")?;
    // Re-read under the lock: another process may have migrated meanwhile.
    let found: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .ctx(path, "reading the schema version")?;
    if found > SCHEMA_VERSION {
        // Dropping `tx` rolls back; nothing was written.
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found,
            known: SCHEMA_VERSION,
        });
    }
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    let start = usize::try_from(found).unwrap_or(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(start) {
        tracing::debug!(path = %path.display(), to = i + 1, "migrating run database");
        tx.execute_batch(sql)
            .ctx(path, "applying a schema migration")?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .ctx(path, "recording the schema version")?;
    tx.commit().ctx(path, "committing the schema migration")?;
    Ok(())
}
