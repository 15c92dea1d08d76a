//! The schema, versioned by `PRAGMA user_version`.
//!
//! `VERSIONS[i]` takes the database from version `i` to `i + 1`. All
//! pending ones run inside ONE `BEGIN EXCLUSIVE` transaction that re-reads
//! `user_version` after taking the lock: when two processes open a fresh
//! database at once, one migrates and the other, once it gets the lock, sees
//! the work done. A failed migration leaves the file as it was.
//!
//! Never edit a released migration; append a new one.

use rusqlite::{OptionalExtension, params};

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

/// Version 1's SQL, for tests that build an old database.
#[cfg(test)]
pub(super) const V1_FOR_TESTS: &str = V1;

/// Version 2: large texts stored once (`blobs`, content-addressed); an
/// invocation written whole with its step (its lifecycle as a JSON column,
/// no separate table), with the agent's process group, its start time and
/// why it could not start; `CHECK`s that every SQLite's `integrity_check`
/// accepts on NULLs (`x IS NULL OR json_valid(x)`: SQLite before 3.45
/// reports `json_valid(NULL)` as a failed CHECK); and the run owner's start
/// time, so a reused pid is not mistaken for a live owner.
///
/// The tables that change are rebuilt (SQLite cannot alter a CHECK), with
/// foreign keys off for the rebuild (see `migrate`); their rows are copied
/// by [`copy_v1_rows`], which hashes texts into `blobs`.
const V2_CREATE: &str = r#"
CREATE TABLE blobs (
    id    INTEGER PRIMARY KEY,
    hash  TEXT NOT NULL UNIQUE,            -- SHA-256 (hex) of the content
    size  INTEGER NOT NULL CHECK (size > 0),
    text  TEXT,                            -- content that is UTF-8 text without NUL
    bytes BLOB,                            -- any other content, byte for byte
    CHECK ((text IS NULL) <> (bytes IS NULL))
) STRICT;

CREATE TABLE invocations_v2 (
    id                INTEGER PRIMARY KEY,
    run_id            TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    n                 INTEGER NOT NULL CHECK (n >= 1),
    state             TEXT NOT NULL,
    agent             TEXT NOT NULL,
    attempt           INTEGER NOT NULL,
    lifecycle_fsm     TEXT NOT NULL,
    lifecycle         TEXT NOT NULL CHECK (json_valid(lifecycle)),
    argv              TEXT NOT NULL CHECK (json_valid(argv)),
    prompt            INTEGER REFERENCES blobs(id),
    context           INTEGER REFERENCES blobs(id),
    started_at        TEXT NOT NULL,
    ended_at          TEXT,
    status            TEXT NOT NULL
                      CHECK (status IN ('running', 'completed', 'failed', 'abandoned')),
    outcome           TEXT CHECK (outcome IS NULL OR outcome IN
                      ('output', 'invalid_output', 'process_error', 'timeout')),
    error             TEXT,                -- why the agent could not start
    pgid              INTEGER,             -- the agent's process group
    process_started   INTEGER,             -- its leader's start (clock ticks since boot)
    exit_code         INTEGER,
    signal            INTEGER,
    timed_out         INTEGER NOT NULL DEFAULT 0 CHECK (timed_out IN (0, 1)),
    duration_ms       INTEGER,
    stdout            INTEGER REFERENCES blobs(id),
    stderr            INTEGER REFERENCES blobs(id),
    stdout_bytes      INTEGER NOT NULL DEFAULT 0,
    stderr_bytes      INTEGER NOT NULL DEFAULT 0,
    parsed_output     INTEGER REFERENCES blobs(id),
    validation_errors TEXT CHECK (validation_errors IS NULL OR json_valid(validation_errors)),
    UNIQUE (run_id, n)
) STRICT;

CREATE TABLE messages_v2 (
    id      INTEGER PRIMARY KEY,
    run_id  TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,     -- the workflow transition that produced it
    kind    TEXT NOT NULL,
    state   TEXT NOT NULL,
    payload INTEGER NOT NULL REFERENCES blobs(id),
    at      TEXT NOT NULL,
    FOREIGN KEY (run_id, seq) REFERENCES transitions(run_id, seq) ON DELETE CASCADE
) STRICT;

ALTER TABLE runs ADD COLUMN owner_started INTEGER;
"#;

const V2_SWAP: &str = r#"
DROP TABLE invocation_transitions;
DROP TABLE messages;
DROP TABLE invocations;
ALTER TABLE invocations_v2 RENAME TO invocations;
ALTER TABLE messages_v2 RENAME TO messages;
CREATE INDEX messages_by_run_kind ON messages(run_id, kind, id);
"#;

/// Version 3: what an invocation did to the workspace (the step's commit,
/// tree and changed paths, or what was rejected or discarded) and why it
/// failed (the class and the CLI's own reason), what it used (tokens, cost),
/// and each run's workspace (how to find it again: mode, paths, refs).
/// `class` is free text checked by the code, so new classes need no
/// migration.
const V3: &str = r#"
ALTER TABLE runs ADD COLUMN workspace TEXT CHECK (workspace IS NULL OR json_valid(workspace));
ALTER TABLE invocations ADD COLUMN changes TEXT CHECK (changes IS NULL OR json_valid(changes));
ALTER TABLE invocations ADD COLUMN class TEXT;
ALTER TABLE invocations ADD COLUMN reason TEXT;
ALTER TABLE invocations ADD COLUMN usage TEXT CHECK (usage IS NULL OR json_valid(usage));
"#;

/// Version 4: an invocation that failed and was run again under its
/// state's `retry` rule says so (which retry, of how many, after what wait).
const V4: &str = r#"
ALTER TABLE invocations ADD COLUMN retry TEXT CHECK (retry IS NULL OR json_valid(retry));
"#;

/// Version 5: runs may wait for a human (`waiting`, at a gate) or be
/// stopped on request (`stopped`, resumable); `controls` carries what
/// other processes ask of a run — stop, stop now, a gate's answer, a
/// pending message — for the engine to take at its step boundaries (and,
/// for stops, while an agent runs). A CHECK cannot be altered in SQLite, so
/// `runs` is rebuilt (foreign keys are off while migrating).
const V5: &str = r#"
CREATE TABLE runs_v5 (
    id               TEXT PRIMARY KEY NOT NULL,
    epic             TEXT NOT NULL,
    workflow_id      TEXT NOT NULL,
    workflow_version TEXT NOT NULL,
    workflow_hash    TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN
                     ('running', 'waiting', 'interrupted', 'stopped', 'succeeded', 'failed')),
    status_reason    TEXT,
    current_state    TEXT NOT NULL,
    workdir          TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    ended_at         TEXT,
    owner_pid        INTEGER,
    heartbeat_at     TEXT,
    owner_started    INTEGER,
    workspace        TEXT CHECK (workspace IS NULL OR json_valid(workspace)),
    forked_from      TEXT CHECK (forked_from IS NULL OR json_valid(forked_from))
) STRICT;
INSERT INTO runs_v5 (id, epic, workflow_id, workflow_version, workflow_hash, status,
    status_reason, current_state, workdir, created_at, updated_at, ended_at, owner_pid,
    heartbeat_at, owner_started, workspace)
  SELECT id, epic, workflow_id, workflow_version, workflow_hash, status, status_reason,
    current_state, workdir, created_at, updated_at, ended_at, owner_pid, heartbeat_at,
    owner_started, workspace FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v5 RENAME TO runs;

CREATE TABLE controls (
    id          INTEGER PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL CHECK (kind IN ('stop', 'stop_now', 'pending')),
    text        TEXT,
    by          TEXT NOT NULL,
    at          TEXT NOT NULL,
    -- When the engine took it (a stop acknowledged, a pending item handed
    -- to an agent) and, for a pending item, the step that delivered it.
    taken_at    TEXT,
    taken_seq   INTEGER
) STRICT;
CREATE INDEX controls_open ON controls(run_id, taken_at);
"#;

/// Version 6: a context package is stored in two parts, so what stays the
/// same from one visit of a state to the next (the epic, the project, the
/// task spec, the agent's setup) is stored once: `context` holds the rest of
/// the package, `context_step` the members that change at each visit
/// (`package::STEP_MEMBERS`). Rows written before it have the whole
/// package in `context` and no `context_step`.
const V6: &str = r#"
ALTER TABLE invocations ADD COLUMN context_step INTEGER REFERENCES blobs(id);
"#;

/// Version 7: what `go` changed for the run on its command line (`--brain`,
/// `--model`, `--env` names: never values), so that `resume` runs it with
/// the same agents.
const V7: &str = r#"
ALTER TABLE runs ADD COLUMN overrides TEXT CHECK (overrides IS NULL OR json_valid(overrides));
"#;

/// Version 8: no index from a transition to its invocation. Every query
/// follows that reference the other way (from a transition to its
/// invocation, by the invocation's primary key); the index only served a
/// delete of invocations, which modix never does, and cost a page of every
/// step's commit.
const V8: &str = r#"
DROP INDEX IF EXISTS transitions_by_invocation;
"#;

/// Version 9: the members of a context package that change at each visit
/// (`package::STEP_MEMBERS`) are stored in the invocation's row, as
/// JSON, instead of as a blob: they differ at every step, so a blob gained
/// nothing by being content-addressed and cost two more pages (the blob and
/// its hash's index) in every step's commit. Rows written before it have
/// `context_step` (a blob) instead.
const V9: &str = r#"
ALTER TABLE invocations ADD COLUMN context_now TEXT
    CHECK (context_now IS NULL OR json_valid(context_now));
"#;

/// Version 10: what an invocation did to the workspace (`changes`) is
/// stored once, as a blob: a step that changed nothing records the same
/// commit and tree as the one before, ~300 bytes at every step. Rows
/// written before it (and a change found after the fact, by a resume) keep
/// it in `changes`.
const V10: &str = r#"
ALTER TABLE invocations ADD COLUMN changes_ref INTEGER REFERENCES blobs(id);
"#;

/// Version 11: an invocation's command line and lifecycle steps are stored
/// once, as blobs (`argv_ref`, `lifecycle_ref`): both are the same text from
/// one step of an agent to the next (~125 bytes a step). Such rows hold
/// JSON `null` in `argv` and `lifecycle`; rows written before it (and an
/// invocation a resume closed, whose steps carry their own times) keep the
/// text there.
const V11: &str = r#"
ALTER TABLE invocations ADD COLUMN argv_ref INTEGER REFERENCES blobs(id);
ALTER TABLE invocations ADD COLUMN lifecycle_ref INTEGER REFERENCES blobs(id);
"#;

/// Version 12: each run's usage totals on its row (`usage_*`), kept by the
/// step that records an invocation (store::usage), so `history` and the
/// budget read one row, not every invocation of a run (a million for a long
/// loop). Filled for the runs already stored by summing their invocations.
const V12: &str = r#"
ALTER TABLE runs ADD COLUMN usage_invocations INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN usage_priced INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN usage_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN usage_output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN usage_cost_usd REAL NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN usage_turns INTEGER NOT NULL DEFAULT 0;
"#;

/// Version 13: `transitions` keyed by (run, seq) alone, `WITHOUT ROWID`:
/// the table is its primary key's B-tree, so a step writes one of its pages
/// to the WAL instead of two (the rows and the separate key index), and
/// stores its key once. Every read already went by that key.
const V13: &str = r#"
CREATE TABLE transitions_v13 (
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
) STRICT, WITHOUT ROWID;
INSERT INTO transitions_v13 (run_id, seq, at, from_state, event, to_state, attempt, bound,
    agent, reason, redirected, invocation_id)
SELECT run_id, seq, at, from_state, event, to_state, attempt, bound, agent, reason,
    redirected, invocation_id FROM transitions ORDER BY run_id, seq;
DROP TABLE transitions;
ALTER TABLE transitions_v13 RENAME TO transitions;
"#;

/// Version 14: the enum-like CHECKs of `runs` and `invocations` as chains
/// of `=` instead of `IN` lists (see [`in_lists_as_equalities`]).
const V14_TABLES: [(&str, &[&str]); 2] = [
    ("runs", &["status"]),
    ("invocations", &["status", "outcome"]),
];

/// Version 14's change. SQLite evaluates `x IN ('a', 'b', 'c', …)` (more
/// than two values) in a CHECK by building a temporary B-tree of the list,
/// for every row written: three of them per step (the run's status, the
/// invocation's status and outcome), ~2.5 µs each. The same constraint as
/// `x = 'a' OR x = 'b' OR …` costs a few comparisons. Every stored row
/// satisfies both, so the table's definition is rewritten in place, by the
/// procedure SQLite documents for changing a CHECK ("Making Other Kinds Of
/// Table Schema Changes": `writable_schema`, then a new `schema_version`),
/// instead of copying a store's every invocation into a new table. A
/// definition not in the form modix wrote (edited by hand) is left as it is.
fn in_lists_as_equalities(w: &super::Writer<'_>) -> Result<(), StoreError> {
    for (table, columns) in V14_TABLES {
        redefine(w, table, |sql| {
            let mut new = sql.to_owned();
            for column in columns {
                match in_list_as_equalities(&new, column) {
                    Some(rewritten) => new = rewritten,
                    None => {
                        tracing::debug!(table, column, "CHECK not in modix's form; left as it is");
                    }
                }
            }
            new
        })?;
    }
    Ok(())
}

/// Version 15: no `json_valid` CHECK on `invocations.context_now`. It made
/// SQLite parse the package's step part (~9 KB, the previous answer and
/// the feedback) at every step's insert: ~39 µs, a quarter of writing a
/// realistic step's record (docs/performance.md, thirteenth round). The
/// text is only ever written by modix, serialised by serde_json from a
/// document, so it is JSON by construction, and every reader parses it.
/// The other JSON CHECKs stay: they see `'null'`, a NULL or a few bytes.
/// Rewritten in place, as version 14 is.
fn context_now_unchecked(w: &super::Writer<'_>) -> Result<(), StoreError> {
    redefine(w, "invocations", |sql| {
        without_check(sql, CONTEXT_NOW_CHECK).unwrap_or_else(|| {
            tracing::debug!("context_now's CHECK not in modix's form; left as it is");
            sql.to_owned()
        })
    })
}

/// Version 16: a context package's step part refers to the blobs of the
/// messages it quotes instead of holding their payloads again (`package`).
/// Nothing moves: earlier rows hold every payload and read as they are. The
/// version tells an older modix, which would read such a package without
/// its outputs, that this store is newer than it.
fn quotes_by_reference(_: &super::Writer<'_>) -> Result<(), StoreError> {
    Ok(())
}

/// Version 17: a context package's step part keeps of a feedback that
/// quotes the output that sent the work back only the line before it
/// (`package`). Nothing moves, as in version 16; the version tells an older
/// modix, which would read such a feedback as an object, that this store is
/// newer than it.
fn feedback_by_reference(_: &super::Writer<'_>) -> Result<(), StoreError> {
    Ok(())
}

/// The CHECK version 9 gave `context_now`.
const CONTEXT_NOW_CHECK: &str = "CHECK (context_now IS NULL OR json_valid(context_now))";

/// `sql` without its one `check` (and the blanks before it); `None` unless
/// it holds exactly one.
pub(super) fn without_check(sql: &str, check: &str) -> Option<String> {
    let at = sql.find(check)?;
    if sql[at + check.len()..].contains(check) {
        return None;
    }
    let start = sql[..at].trim_end().len();
    Some(format!("{}{}", &sql[..start], &sql[at + check.len()..]))
}

/// Rewrites `table`'s definition with `change`, by the procedure SQLite
/// documents for changing a CHECK ("Making Other Kinds Of Table Schema
/// Changes": `writable_schema`, then a new `schema_version`), instead of
/// copying a store's every row into a new table. Only for changes every
/// stored row already satisfies (a CHECK dropped or made equivalent).
fn redefine(
    w: &super::Writer<'_>,
    table: &str,
    change: impl FnOnce(&str) -> String,
) -> Result<(), StoreError> {
    let path = w.path;
    let sql: String =
        w.tx.query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get(0),
        )
        .ctx(path, "reading a table's definition")?;
    let new = change(&sql);
    if new == sql {
        return Ok(());
    }
    let version: i64 =
        w.tx.pragma_query_value(None, "schema_version", |r| r.get(0))
            .ctx(path, "reading the schema's version")?;
    w.tx.pragma_update(None, "writable_schema", true)
        .ctx(path, "allowing a table's definition to change")?;
    let updated =
        w.tx.execute(
            "UPDATE sqlite_schema SET sql = ?2 WHERE type = 'table' AND name = ?1",
            params![table, new],
        )
        .ctx(path, "rewriting a table's CHECKs");
    w.tx.pragma_update(None, "schema_version", version + 1)
        .ctx(path, "recording the schema's new version")?;
    w.tx.pragma_update(None, "writable_schema", false)
        .ctx(path, "closing the table definitions again")?;
    updated.map(drop)
}

/// `sql` with its one `column IN ('a', 'b', …)` written as
/// `(column = 'a' OR column = 'b' OR …)`; `None` unless there is exactly
/// one such list, of plain quoted words.
pub(super) fn in_list_as_equalities(sql: &str, column: &str) -> Option<String> {
    let marker = format!("({column} IN");
    let marker_alt = format!(" {column} IN");
    let at = match (sql.find(&marker), sql.find(&marker_alt)) {
        (Some(a), None) | (None, Some(a)) => a + 1,
        _ => return None,
    };
    let after = at + column.len() + " IN".len();
    let open = after + sql[after..].find('(')?;
    if !sql[after..open].trim().is_empty() {
        return None;
    }
    let close = open + sql[open..].find(')')?;
    let values: Vec<&str> = sql[open + 1..close].split(',').map(str::trim).collect();
    let plain = |v: &&str| {
        v.len() > 2
            && v.starts_with('\'')
            && v.ends_with('\'')
            && v[1..v.len() - 1]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if values.len() < 2 || !values.iter().all(plain) {
        return None;
    }
    let chain: Vec<String> = values.iter().map(|v| format!("{column} = {v}")).collect();
    let rest = &sql[close + 1..];
    if rest.contains(&marker) || rest.contains(&marker_alt) {
        return None;
    }
    Some(format!("{}({}){}", &sql[..at], chain.join(" OR "), rest))
}

/// One step of the schema's history.
enum Migration {
    Sql(&'static str),
    /// Rows moved by code (hashing texts into blobs, say).
    Code(fn(&super::Writer<'_>) -> Result<(), StoreError>),
}

/// The migrations, in order; a version's steps run together, in one
/// transaction with the others pending. `VERSIONS[i]` are the steps from
/// version `i` to `i + 1`.
const VERSIONS: &[&[Migration]] = &[
    &[Migration::Sql(V1)],
    &[
        Migration::Sql(V2_CREATE),
        Migration::Code(copy_v1_rows),
        Migration::Sql(V2_SWAP),
    ],
    &[Migration::Sql(V3)],
    &[Migration::Sql(V4)],
    &[Migration::Sql(V5)],
    &[Migration::Sql(V6)],
    &[Migration::Sql(V7)],
    &[Migration::Sql(V8)],
    &[Migration::Sql(V9)],
    &[Migration::Sql(V10)],
    &[Migration::Sql(V11)],
    &[Migration::Sql(V12), Migration::Code(tally_usage)],
    &[Migration::Sql(V13)],
    &[Migration::Code(in_lists_as_equalities)],
    &[Migration::Code(context_now_unchecked)],
    &[Migration::Code(quotes_by_reference)],
    &[Migration::Code(feedback_by_reference)],
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = VERSIONS.len() as i64;

/// Version 12's totals for the runs already stored.
fn tally_usage(w: &super::Writer<'_>) -> Result<(), StoreError> {
    w.retally_usage(None)
}

/// Copies version-1 invocations (with their lifecycle rows) and messages
/// into the version-2 tables, texts into `blobs`. Ids are kept, so the
/// transitions that point at invocations still do.
fn copy_v1_rows(w: &super::Writer<'_>) -> Result<(), StoreError> {
    let path = w.path;
    let mut read =
        w.tx.prepare(
            "SELECT id, run_id, n, state, agent, attempt, lifecycle_fsm, argv, prompt, context, \
             started_at, ended_at, status, outcome, exit_code, signal, timed_out, duration_ms, \
             stdout, stderr, stdout_bytes, stderr_bytes, parsed_output, validation_errors, \
             (SELECT json_group_array(json_object('seq', seq, 'at', at, 'from', from_state, \
                     'event', event, 'to', to_state)) \
              FROM (SELECT * FROM invocation_transitions t WHERE t.invocation_id = i.id \
                    ORDER BY seq)) \
             FROM invocations i ORDER BY id",
        )
        .ctx(path, "reading version-1 invocations")?;
    let mut rows = read.query([]).ctx(path, "reading version-1 invocations")?;
    while let Some(r) = rows.next().ctx(path, "reading version-1 invocations")? {
        let text = |i: usize| -> Result<String, StoreError> {
            r.get::<_, Option<String>>(i)
                .map(Option::unwrap_or_default)
                .ctx(path, "reading version-1 invocations")
        };
        let blob = |i: usize| -> Result<Option<i64>, StoreError> { w.blob(text(i)?.as_bytes()) };
        let (prompt, context, stdout, stderr) = (blob(8)?, blob(9)?, blob(18)?, blob(19)?);
        let parsed = blob(22)?;
        // Columns copied as they are; texts become blob ids.
        w.tx.execute(
            "INSERT INTO invocations_v2 (id, run_id, n, state, agent, attempt, lifecycle_fsm, \
             lifecycle, argv, prompt, context, started_at, ended_at, status, outcome, exit_code, \
             signal, timed_out, duration_ms, stdout, stderr, stdout_bytes, stderr_bytes, \
             parsed_output, validation_errors) \
             SELECT id, run_id, n, state, agent, attempt, lifecycle_fsm, ?2, argv, ?3, ?4, \
             started_at, ended_at, status, \
             CASE WHEN outcome = 'cancelled' THEN NULL ELSE outcome END, exit_code, signal, \
             timed_out, duration_ms, ?5, ?6, stdout_bytes, stderr_bytes, ?7, validation_errors \
             FROM invocations WHERE id = ?1",
            params![
                r.get::<_, i64>(0)
                    .ctx(path, "reading version-1 invocations")?,
                text(24)?,
                prompt,
                context,
                stdout,
                stderr,
                parsed
            ],
        )
        .ctx(path, "copying an invocation")?;
    }
    copy_v1_messages(w)
}

fn copy_v1_messages(w: &super::Writer<'_>) -> Result<(), StoreError> {
    let path = w.path;
    let mut read =
        w.tx.prepare("SELECT id, payload FROM messages ORDER BY id")
            .ctx(path, "reading version-1 messages")?;
    let rows: Vec<(i64, String)> = read
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .and_then(|rows| rows.collect())
        .ctx(path, "reading version-1 messages")?;
    for (id, payload) in rows {
        let blob = w.blob(payload.as_bytes())?;
        w.tx.execute(
            "INSERT INTO messages_v2 (id, run_id, seq, kind, state, payload, at) \
             SELECT id, run_id, seq, kind, state, ?2, at FROM messages WHERE id = ?1",
            params![id, blob],
        )
        .ctx(path, "copying a message")?;
    }
    Ok(())
}

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
///
/// Foreign keys are off while it runs (SQLite ignores the pragma inside a
/// transaction, so it is set around it): rebuilding a table means dropping
/// the old one, which with foreign keys on would cascade deletes or fail.
/// `foreign_key_check` then proves, before the commit, that every reference
/// still holds.
pub(super) fn migrate(store: &mut Store) -> Result<(), StoreError> {
    let path = store.path.clone();
    let path = path.as_path();
    store
        .conn
        .pragma_update(None, "foreign_keys", false)
        .ctx(path, "pausing foreign keys to migrate")?;
    let migrated = migrate_locked(store, path);
    let restored = store
        .conn
        .pragma_update(None, "foreign_keys", true)
        .ctx(path, "restoring foreign keys");
    migrated?;
    restored
}

fn migrate_locked(store: &mut Store, path: &std::path::Path) -> Result<(), StoreError> {
    let tx = super::tx::Tx::exclusive(&mut store.conn)
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
    // The blobs a migration writes are not learnt (it commits below).
    let mut unlearnt = super::blobs::Known::default();
    let writer = super::Writer {
        tx,
        path,
        redactor: &store.redactor,
        blob_ids: &mut unlearnt,
        new_blob_ids: Default::default(),
        syncing: &store.syncing,
    };
    let start = usize::try_from(found).unwrap_or(0);
    for (i, steps) in VERSIONS.iter().enumerate().skip(start) {
        tracing::debug!(path = %path.display(), to = i + 1, "migrating run database");
        for step in *steps {
            match step {
                Migration::Sql(sql) => writer
                    .tx
                    .execute_batch(sql)
                    .ctx(path, "applying a schema migration")?,
                Migration::Code(f) => f(&writer)?,
            }
        }
    }
    let broken: Option<String> = writer
        .tx
        .query_row("PRAGMA foreign_key_check", [], |r| r.get(0))
        .optional()
        .ctx(path, "checking references after the migration")?;
    if let Some(table) = broken {
        return Err(StoreError::Invalid {
            path: path.to_path_buf(),
            message: format!(
                "migration left a broken reference in table {table}; nothing was changed"
            ),
        });
    }
    writer
        .tx
        .pragma_update(None, "user_version", SCHEMA_VERSION)
        .ctx(path, "recording the schema version")?;
    writer
        .tx
        .commit()
        .ctx(path, "committing the schema migration")?;
    Ok(())
}
