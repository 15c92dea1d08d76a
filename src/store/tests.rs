//! Tests of the store against real database files in temporary directories.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use rusqlite::params;
use serde_json::{Value, json};

use super::*;
use crate::fsm::Outcome;

/// SQLite's own check of the whole database passes.
pub(super) fn assert_intact(store: &Store) {
    let check: String = store
        .conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

/// A store at `path` that redacts `secret` as an Anthropic key.
fn redacting(path: &std::path::Path, secret: &str) -> Store {
    let redactor = crate::shell::Redactor::new([("ANTHROPIC_API_KEY", secret)]);
    Store::open(path).unwrap().with_redactor(redactor)
}

/// How many blobs hold `text`.
fn blobs_holding(store: &Store, text: &str) -> i64 {
    store
        .conn
        .query_row("SELECT count(*) FROM blobs WHERE text = ?1", [text], |r| {
            r.get(0)
        })
        .unwrap()
}

/// How many blobs hold `part` somewhere in their text.
fn blobs_with(store: &Store, part: &str) -> i64 {
    store
        .conn
        .query_row(
            "SELECT count(*) FROM blobs WHERE instr(text, ?1)",
            [part],
            |r| r.get(0),
        )
        .unwrap()
}

fn db(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join(DB_FILE)
}

pub(super) fn new_run() -> NewRun {
    NewRun {
        epic: "add login".into(),
        workflow_id: "default".into(),
        workflow_version: "1.0.0".into(),
        workflow_hash: "abc123".into(),
        initial_state: "plan".into(),
        workdir: "/tmp/project".into(),
        id: None,
        workspace: None,
        overrides: None,
    }
}

fn transition(from: &str, event: &str, to: &str) -> NewTransition {
    NewTransition {
        from: from.into(),
        event: event.into(),
        to: to.into(),
        attempt: 1,
        bound: None,
        agent: None,
        reason: None,
        redirected: false,
    }
}

pub(super) fn step(from: &str, event: &str, to: &str) -> Step {
    Step {
        transition: transition(from, event, to),
        invocation: None,
        messages: Vec::new(),
        run_status: RunStatus::Running,
        workspace: None,
        delivered: Vec::new(),
    }
}

pub(super) fn new_invocation() -> NewInvocation {
    NewInvocation {
        state: "plan".into(),
        agent: "claude".into(),
        attempt: 1,
        lifecycle_fsm: "agent".into(),
        lifecycle: vec![
            ("IDLE".into(), "start".into(), "EXECUTING".into()),
            ("EXECUTING".into(), "exit".into(), "COMPLETED".into()),
        ],
        argv: vec!["claude".into(), "-p".into(), "<redacted>".into()],
        prompt: "plan the epic".into(),
        context: json!({"epic": "add login"}),
        started_at: now(),
        process: Some(ProcessIds {
            pgid: 4242,
            started: 99,
        }),
        error: None,
        status: InvocationStatus::Completed,
        outcome: Some(Outcome::Output),
        exit_code: Some(0),
        signal: None,
        timed_out: false,
        duration_ms: Some(1234),
        stdout: b"{\"tasks\":[]}".to_vec(),
        stderr: Vec::new(),
        stdout_bytes: 12,
        stderr_bytes: 0,
        parsed_output: Some(json!({"tasks": []})),
        validation_errors: Vec::new(),
        class: None,
        reason: None,
        usage: None,
        changes: None,
        retry: None,
        texts: None,
    }
}

fn user_version(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap()
}

#[test]
fn migrates_from_scratch_and_reopens_idempotently() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let mut store = Store::open(&path).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    drop(store);
    assert_eq!(user_version(&path), SCHEMA_VERSION);

    let store = Store::open(&path).unwrap();
    assert_eq!(user_version(&path), SCHEMA_VERSION);
    assert_eq!(store.run(&run.id).unwrap(), run);
    let mode: String = store
        .conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let fk: bool = store
        .conn
        .pragma_query_value(None, "foreign_keys", |r| r.get(0))
        .unwrap();
    assert!(fk);
    let sync: i64 = store
        .conn
        .pragma_query_value(None, "synchronous", |r| r.get(0))
        .unwrap();
    // SQLite writes a commit's frames; modix syncs the log itself.
    assert_eq!(sync, 1, "NORMAL, the log synced by modix");
    assert!(matches!(store.syncing, super::durable::Syncing::Log(_)));
}

/// The enum-like CHECKs of the rows every step writes hold as before, and
/// cost no temporary B-tree per row (store v14).
#[test]
fn the_checks_every_step_meets_build_no_temporary_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let mut store = Store::open(&path).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    let sql = |table: &str| -> String {
        store
            .conn
            .query_row(
                "SELECT sql FROM sqlite_schema WHERE name = ?1",
                [table],
                |r| r.get(0),
            )
            .unwrap()
    };
    let runs = sql("runs");
    assert!(
        runs.contains("(status = 'running' OR status = 'waiting' OR "),
        "{runs}"
    );
    let invocations = sql("invocations");
    assert!(
        invocations.contains("(outcome IS NULL OR (outcome = 'output' OR "),
        "{invocations}"
    );
    for text in [&runs, &invocations] {
        assert!(
            !text.contains("status IN") && !text.contains("outcome IN"),
            "{text}"
        );
    }
    let opcodes = |stmt: &str| -> Vec<String> {
        let mut s = store.conn.prepare(&format!("EXPLAIN {stmt}")).unwrap();
        s.query_map(["an id", "failed"], |r| r.get::<_, String>(1))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let update = opcodes("UPDATE runs SET status = ?2 WHERE id = ?1");
    assert!(!update.iter().any(|o| o == "OpenEphemeral"), "{update:?}");
    // Still refused: a status that is not one.
    let bad = store.conn.execute(
        "UPDATE runs SET status = 'exploded' WHERE id = ?1",
        [&run.id],
    );
    assert!(bad.unwrap_err().to_string().contains("CHECK"));
    let mut s = step("plan", "planned", "execute");
    s.invocation = Some(new_invocation());
    store.record_step(&run.id, &s).unwrap();
    let bad = store.conn.execute(
        "UPDATE invocations SET outcome = 'maybe' WHERE run_id = ?1",
        [&run.id],
    );
    assert!(bad.unwrap_err().to_string().contains("CHECK"));
    assert_intact(&store);
    drop(store);
    // Reopened (by a fresh connection reading the new definitions).
    let store = Store::open(&path).unwrap();
    assert_eq!(store.run(&run.id).unwrap().id, run.id);
    assert_intact(&store);
}

#[test]
fn in_lists_are_rewritten_only_in_the_form_modix_wrote() {
    use super::migrations::in_list_as_equalities as rewrite;
    assert_eq!(
        rewrite("x TEXT CHECK (status IN\n   ('a', 'b_c', 'd'))", "status").as_deref(),
        Some("x TEXT CHECK ((status = 'a' OR status = 'b_c' OR status = 'd'))")
    );
    assert_eq!(
        rewrite("CHECK (o IS NULL OR o IN ('a', 'b'))", "o").as_deref(),
        Some("CHECK (o IS NULL OR (o = 'a' OR o = 'b'))")
    );
    // Anything else is left to the caller as it is.
    for other in [
        "CHECK (status IN (SELECT s FROM t))",
        "CHECK (status IN ('a', 'it''s'))",
        "CHECK (status IN ('a'))",
        "CHECK (status IN ('a', 'b') AND (status IN ('c', 'd')))",
        "CHECK (status = 'a')",
    ] {
        assert_eq!(rewrite(other, "status"), None, "{other}");
    }
}

/// Store v15: no `json_valid` CHECK on `context_now` (parsing the
/// package's step part at every insert was a quarter of writing a
/// realistic record); the other JSON CHECKs hold. A v14 store is moved
/// to it in place, its rows kept.
#[test]
fn context_now_is_written_without_a_json_check_and_a_v14_store_is_moved_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let mut store = Store::open(&path).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    let mut s = step("plan", "planned", "execute");
    s.invocation = Some(new_invocation());
    store.record_step(&run.id, &s).unwrap();
    let sql = |store: &Store| -> String {
        store
            .conn
            .query_row(
                "SELECT sql FROM sqlite_schema WHERE name = 'invocations'",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    let fresh = sql(&store);
    assert!(!fresh.contains("json_valid(context_now)"), "{fresh}");
    assert!(fresh.contains("context_now TEXT, changes_ref"), "{fresh}");
    assert!(fresh.contains("CHECK (json_valid(argv))"), "{fresh}");
    let bad = store
        .conn
        .execute("UPDATE invocations SET argv = 'not json'", []);
    assert!(bad.unwrap_err().to_string().contains("CHECK"));
    // The v14 definition back, as a store written by the last version has it.
    let old = fresh.replace(
        "context_now TEXT,",
        "context_now TEXT\n    CHECK (context_now IS NULL OR json_valid(context_now)),",
    );
    let version: i64 = store
        .conn
        .pragma_query_value(None, "schema_version", |r| r.get(0))
        .unwrap();
    store
        .conn
        .execute_batch(&format!(
            "PRAGMA writable_schema = ON; \
             UPDATE sqlite_schema SET sql = '{}' WHERE name = 'invocations'; \
             PRAGMA schema_version = {}; PRAGMA writable_schema = OFF; \
             PRAGMA user_version = 14;",
            old.replace('\'', "''"),
            version + 1
        ))
        .unwrap();
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(sql(&store), fresh);
    let version: i64 = store
        .conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, super::SCHEMA_VERSION);
    assert_eq!(store.invocations(&run.id).unwrap().len(), 1);
    assert_intact(&store);
}

#[test]
fn a_check_is_dropped_only_when_it_is_there_once() {
    use super::migrations::without_check;
    let check = "CHECK (c IS NULL OR json_valid(c))";
    assert_eq!(
        without_check(
            "a TEXT, c TEXT\n    CHECK (c IS NULL OR json_valid(c)), d INTEGER",
            check
        )
        .as_deref(),
        Some("a TEXT, c TEXT, d INTEGER")
    );
    assert_eq!(without_check("a TEXT, c TEXT, d INTEGER", check), None);
    assert_eq!(without_check(&format!("c {check}, d {check}"), check), None);
}

#[test]
fn newer_schema_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE future (x); PRAGMA user_version = 99;")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::TooNew { found: 99, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("newer modix"), "{msg}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "file untouched");
    assert!(!dir.path().join("modix.db-wal").exists());
}

#[test]
fn create_run_and_records_serialize() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    assert_eq!(run.id.len(), 26);
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.current_state, "plan");
    assert_eq!(run.ended_at, None);
    // RFC 3339 UTC, millisecond precision.
    assert_eq!(
        run.created_at.len(),
        "2025-01-01T00:00:00.000Z".len(),
        "{}",
        run.created_at
    );
    assert!(run.created_at.ends_with('Z'));
    let v = serde_json::to_value(store.runs(10).unwrap()).unwrap();
    assert_eq!(v[0]["status"], "running");
    assert_eq!(v[0]["transitions"], 0);
}

#[test]
fn steps_are_numbered_without_gaps_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();

    let mut s = step("plan", "planned", "execute");
    s.invocation = Some(new_invocation());
    s.messages.push(NewMessage {
        kind: "task_spec".into(),
        state: "plan".into(),
        payload: json!({"tasks": ["a"]}),
    });
    let t1 = store.record_step(&run.id, &s).unwrap();
    assert_eq!(t1.seq, 1);
    assert_eq!(t1.invocation, Some(1));

    let states = ["execute", "test", "execute", "test"];
    for w in states.windows(2) {
        store
            .record_step(&run.id, &step(w[0], "next", w[1]))
            .unwrap();
    }
    let mut last = step("test", "passed", "done");
    last.run_status = RunStatus::Succeeded;
    last.messages.push(NewMessage {
        kind: "task_spec".into(),
        state: "test".into(),
        payload: json!({"tasks": ["b"]}),
    });
    store.record_step(&run.id, &last).unwrap();

    let seqs: Vec<u32> = store
        .transitions(&run.id)
        .unwrap()
        .iter()
        .map(|t| t.seq)
        .collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);

    let run = store.run(&run.id).unwrap();
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(run.current_state, "done");
    assert!(run.ended_at.is_some());

    let invs = store.invocations(&run.id).unwrap();
    assert_eq!(invs.len(), 1);
    let i = &invs[0];
    assert_eq!(
        (i.n, i.status, i.outcome),
        (1, InvocationStatus::Completed, Some(Outcome::Output))
    );
    assert_eq!(i.argv[2], "<redacted>");
    assert_eq!(i.parsed_output, Some(json!({"tasks": []})));
    assert_eq!(
        (i.prompt.as_str(), i.stdout.as_str()),
        ("plan the epic", "{\"tasks\":[]}")
    );
    assert_eq!(i.context, json!({"epic": "add login"}));
    assert_eq!(i.pgid, Some(4242));
    let life: Vec<_> = i.lifecycle.iter().map(|l| (l.seq, l.to.as_str())).collect();
    assert_eq!(life, vec![(1, "EXECUTING"), (2, "COMPLETED")]);
    assert_eq!(store.invocation(&run.id, 1).unwrap(), *i);
    assert!(matches!(
        store.invocation(&run.id, 2),
        Err(StoreError::UnknownInvocation { n: 2, .. })
    ));

    let msgs = store.messages(&run.id).unwrap();
    assert_eq!(msgs.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![1, 5]);
    let tail = store.run_tail(&run.id, 5).unwrap();
    let latest = tail.latest_of("task_spec").unwrap();
    assert_eq!(latest.payload, json!({"tasks": ["b"]}));
    assert_eq!(tail.latest_of("feedback"), None);

    let summary = &store.runs(10).unwrap()[0];
    assert_eq!((summary.transitions, summary.invocations), (5, 1));
    assert!(summary.duration_ms.is_some());

    // A finished run takes no more steps.
    let err = store
        .record_step(&run.id, &step("done", "again", "plan"))
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");
}

#[test]
fn step_from_the_wrong_state_is_a_conflict_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    store
        .record_step(&run.id, &step("plan", "planned", "execute"))
        .unwrap();

    // A second resumer still believes the run is in `plan`.
    let mut stale = step("plan", "planned", "execute");
    stale.invocation = Some(new_invocation());
    stale.messages.push(NewMessage {
        kind: "task_spec".into(),
        state: "plan".into(),
        payload: json!(1),
    });
    let err = store.record_step(&run.id, &stale).unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");
    assert!(err.to_string().contains("another process"), "{err}");

    assert_eq!(store.transitions(&run.id).unwrap().len(), 1);
    assert!(store.messages(&run.id).unwrap().is_empty());
    assert!(
        store.invocation(&run.id, 1).is_err(),
        "the stale step's invocation"
    );
    assert_eq!(store.run(&run.id).unwrap().current_state, "execute");

    let err = store
        .record_step("01NOPE", &step("plan", "x", "y"))
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
}

#[test]
fn prefix_lookup_unique_ambiguous_and_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let a = store.create_run(&new_run()).unwrap();
    // Force a second id that shares a known prefix with the first.
    let b_id = format!("{}ZZZZZZZZZZ", &a.id[..16]);
    let b_id = if b_id == a.id {
        format!("{}YYYYYYYYYY", &a.id[..16])
    } else {
        b_id
    };
    store
        .conn
        .execute(
            "INSERT INTO runs (id, epic, workflow_id, workflow_version, workflow_hash, status, \
             current_state, workdir, created_at, updated_at) \
             SELECT ?1, epic, workflow_id, workflow_version, workflow_hash, status, \
             current_state, workdir, created_at, updated_at FROM runs WHERE id = ?2",
            [&b_id, &a.id],
        )
        .unwrap();

    assert_eq!(store.run(&a.id).unwrap().id, a.id);
    assert_eq!(store.run(&a.id.to_lowercase()).unwrap().id, a.id);
    assert_eq!(store.run(&a.id[..20]).unwrap().id, a.id);
    match store.run(&a.id[..8].to_lowercase()) {
        Err(StoreError::Ambiguous {
            prefix, candidates, ..
        }) => {
            assert_eq!(prefix, a.id[..8].to_lowercase());
            let mut want = vec![a.id.clone(), b_id.clone()];
            want.sort();
            want.reverse();
            assert_eq!(candidates, want);
        }
        other => panic!("expected Ambiguous, got {other:?}"),
    }
    // The end of an id is the short id of its branch (`modix/<short>`).
    assert_eq!(store.run(&a.id[18..].to_lowercase()).unwrap().id, a.id);
    assert!(
        matches!(
            store.run("ZZZZZZZZ"),
            Ok(r) if r.id == b_id
        ) || b_id.ends_with("YYYYYYYYYY")
    );
    for bad in ["", "  ", "QQQQQQQQ", "01*", "0?", "ü", "AW"] {
        assert!(
            matches!(store.run(bad), Err(StoreError::UnknownRun { .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn dropped_transaction_leaves_the_run_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let mut store = Store::open(&path).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    store
        .record_step(&run.id, &step("plan", "planned", "execute"))
        .unwrap();
    let mut s = step("execute", "done", "test");
    s.invocation = Some(new_invocation());
    s.messages.push(NewMessage {
        kind: "execution_result".into(),
        state: "execute".into(),
        payload: json!({"ok": true}),
    });
    {
        let w = store.write_tx().unwrap();
        write_step_for_test(&w, &run.id, &s);
        // Another connection sees none of it before commit.
        let other = Store::open(&path).unwrap();
        assert_eq!(other.transitions(&run.id).unwrap().len(), 1);
        // "Crash": the transaction never commits, and the connection goes away.
        std::mem::forget(w);
    }
    drop(store);

    let store = Store::open(&path).unwrap();
    let after = store.run(&run.id).unwrap();
    assert_eq!(after.current_state, "execute");
    assert_eq!(after.status, RunStatus::Running);
    assert_eq!(store.transitions(&run.id).unwrap().len(), 1);
    assert!(store.messages(&run.id).unwrap().is_empty());
    assert!(
        store.invocation(&run.id, 1).is_err(),
        "nothing of the step leaked"
    );
}

/// Set in the child process of [`killed_process_mid_step_leaves_the_run_unchanged`].
const CRASH_ENV: &str = "MODIX_STORE_CRASH_DB";

/// Not a test on its own: a no-op unless [`CRASH_ENV`] names a database, in
/// which case it writes half a step and kills its own process with SIGKILL.
#[test]
fn crash_child_writes_half_a_step_and_dies() {
    let Some(path) = std::env::var_os(CRASH_ENV) else {
        return;
    };
    let path = PathBuf::from(path);
    let mut store = Store::open(&path).unwrap();
    let run = store.runs(1).unwrap().remove(0).run;
    let w = store.write_tx().unwrap();
    let mut s = step("execute", "done", "test");
    s.messages.push(NewMessage {
        kind: "execution_result".into(),
        state: "execute".into(),
        payload: json!({"big": "x".repeat(1 << 20)}),
    });
    record::write_step(&w, &run.id, &s, false, None).unwrap();
    // Push the uncommitted pages into the WAL file, as a big step would.
    w.tx.cache_flush().unwrap();
    // kill -9 ourselves: no destructors, no rollback, no core dump.
    let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::SIGKILL);
    unreachable!("SIGKILL cannot be caught");
}

#[test]
fn killed_process_mid_step_leaves_the_run_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let mut store = Store::open(&path).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    store
        .record_step(&run.id, &step("plan", "planned", "execute"))
        .unwrap();
    drop(store);

    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store::tests::crash_child_writes_half_a_step_and_dies",
        ])
        .args(["--test-threads", "1", "--nocapture"])
        .env(CRASH_ENV, &path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(
        status.signal(),
        Some(9),
        "the child should have been killed: {status}"
    );

    let store = Store::open(&path).unwrap();
    let after = store.run(&run.id).unwrap();
    assert_eq!(after.current_state, "execute");
    assert_eq!(store.transitions(&run.id).unwrap().len(), 1);
    assert!(store.messages(&run.id).unwrap().is_empty());
    // The database is healthy and takes the step for real now.
    store_ok(&path);
}

fn store_ok(path: &Path) {
    let mut store = Store::open(path).unwrap();
    let run = store.runs(1).unwrap().remove(0).run;
    assert_intact(&store);
    let t = store
        .record_step(&run.id, &step("execute", "done", "test"))
        .unwrap();
    assert_eq!(t.seq, 2);
}

fn write_step_for_test(w: &Writer<'_>, run_id: &str, s: &Step) {
    let (t, ..) = record::write_step(w, run_id, s, false, None).unwrap();
    assert_eq!(t.seq, 2);
}

#[test]
fn abandon_open_invocations_closes_legacy_running_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    let mut s = step("plan", "planned", "execute");
    s.invocation = Some(new_invocation());
    store.record_step(&run.id, &s).unwrap();
    // A modix before 0.2 left two invocations marked running.
    for n in [2, 3] {
        store
            .conn
            .execute(
                "INSERT INTO invocations (run_id, n, state, agent, attempt, lifecycle_fsm, \
                 lifecycle, argv, started_at, status) VALUES (?1, ?2, 'execute', 'a', 1, 'agent', \
                 '[{\"seq\":1,\"at\":\"x\",\"from\":\"IDLE\",\"event\":\"start\",\"to\":\"EXECUTING\"}]', \
                 '[]', 'x', 'running')",
                params![run.id, n],
            )
            .unwrap();
    }
    // The caller says where an abandoned invocation ends; the store passes
    // it the invocation's lifecycle and the state it was last seen in.
    let abandoned = |fsm: &str, last: &str| {
        assert_eq!(fsm, "agent");
        Some((last.to_owned(), "abandoned".to_owned(), "FAILED".to_owned()))
    };
    assert_eq!(
        store.abandon_open_invocations(&run.id, abandoned).unwrap(),
        2
    );
    assert_eq!(
        store.abandon_open_invocations(&run.id, abandoned).unwrap(),
        0
    );
    let invs = store.invocations(&run.id).unwrap();
    assert_eq!(invs.iter().map(|i| i.n).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(invs[0].status, InvocationStatus::Completed);
    for i in &invs[1..] {
        assert_eq!(i.status, InvocationStatus::Abandoned);
        assert_eq!(i.outcome, None);
        assert!(i.ended_at.is_some());
        let last = i.lifecycle.last().unwrap();
        assert_eq!(
            (
                last.seq,
                last.from.as_str(),
                last.event.as_str(),
                last.to.as_str()
            ),
            (2, "EXECUTING", "abandoned", "FAILED")
        );
    }
}

#[test]
fn set_status_and_claims() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    let me = std::process::id();

    // A live other owner (this very process, under its real pid) blocks.
    store.claim_run(&run, me).unwrap();
    let run = store.run(&run.id).unwrap();
    store.claim_run(&run, me).unwrap(); // re-claim by the owner is fine
    let err = store.claim_run(&run, me + 1).unwrap_err();
    assert!(
        matches!(err, StoreError::Busy { pid, .. } if pid == me),
        "{err:?}"
    );

    // Ctrl-C: Interrupted releases the claim, so a resumer may take it.
    store
        .set_status(&run.id, RunStatus::Interrupted, Some("Ctrl-C"))
        .unwrap();
    let r = store.run(&run.id).unwrap();
    assert_eq!(
        (r.status, r.status_reason.as_deref(), r.owner_pid),
        (RunStatus::Interrupted, Some("Ctrl-C"), None)
    );
    assert_eq!(r.ended_at, None);

    // kill -9: the owner is gone but the run still says Running.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    store.set_status(&run.id, RunStatus::Running, None).unwrap();
    let run = store.run(&run.id).unwrap();
    store.claim_run(&run, dead).unwrap();
    store.claim_run(&run, me).unwrap();
    assert_eq!(store.run(&run.id).unwrap().owner_pid, Some(me));
    store.release_run(&run.id, me).unwrap();
    assert_eq!(store.run(&run.id).unwrap().owner_pid, None);

    store
        .set_status(&run.id, RunStatus::Failed, Some("gave up"))
        .unwrap();
    assert!(store.run(&run.id).unwrap().ended_at.is_some());
    assert!(matches!(
        store.set_status("NOPE", RunStatus::Failed, None),
        Err(StoreError::NotFound { .. })
    ));
    let mut gone = run.clone();
    gone.id = "NOPE".into();
    assert!(matches!(
        store.claim_run(&gone, me),
        Err(StoreError::NotFound { .. })
    ));
}

/// Two people answering one gate: the first claim holds the run before it
/// says running again, and the second is refused rather than taking it
/// over (and dropping it again on its way out).
#[test]
fn a_claim_holds_a_waiting_run_and_a_stale_look_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    store
        .set_status(&run.id, RunStatus::Waiting, Some("Approve?"))
        .unwrap();
    let seen = store.run(&run.id).unwrap();
    let me = std::process::id();
    store.claim_run(&seen, me).unwrap();
    let err = store.claim_run(&seen, me + 1).unwrap_err();
    assert!(
        matches!(err, StoreError::Busy { pid, .. } if pid == me),
        "{err:?}"
    );
    // Nor is a run someone is answering stopped at its gate under them.
    let err = store
        .set_status_as_seen(&seen, RunStatus::Stopped, Some("stop"))
        .unwrap_err();
    assert!(matches!(err, StoreError::Busy { .. }), "{err:?}");
    // The first one answered and is done; the second looked before that.
    store
        .set_status(&run.id, RunStatus::Stopped, Some("--later"))
        .unwrap();
    let err = store.claim_run(&seen, me + 1).unwrap_err();
    assert!(
        matches!(&err, StoreError::Changed { now, .. } if now == "stopped in plan"),
        "{err:?}"
    );
    assert_eq!(store.run(&run.id).unwrap().owner_pid, None);
}

#[test]
fn two_writers_on_one_file_do_not_collide() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    Store::open(&path).unwrap();
    const STEPS: u32 = 200;
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let path = path.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || -> Result<String, StoreError> {
                let mut store = Store::open(&path)?;
                let run = store.create_run(&new_run())?;
                barrier.wait();
                for i in 0..STEPS {
                    let (from, to) = if i % 2 == 0 {
                        ("plan", "execute")
                    } else {
                        ("execute", "plan")
                    };
                    let mut s = step(from, "next", to);
                    s.invocation = Some(new_invocation());
                    s.messages.push(NewMessage {
                        kind: "feedback".into(),
                        state: from.into(),
                        payload: json!(i),
                    });
                    store.record_step(&run.id, &s)?;
                    // Readers interleave with the other writer's commits.
                    store.runs(5)?;
                }
                Ok(run.id)
            })
        })
        .collect();
    let ids: Vec<String> = handles
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    let store = Store::open(&path).unwrap();
    for id in &ids {
        let seqs: Vec<u32> = store
            .transitions(id)
            .unwrap()
            .iter()
            .map(|t| t.seq)
            .collect();
        assert_eq!(seqs, (1..=STEPS).collect::<Vec<_>>());
        assert_eq!(store.invocations(id).unwrap().len(), STEPS as usize);
        assert_eq!(store.messages(id).unwrap().len(), STEPS as usize);
    }
}

#[test]
fn concurrent_opens_of_a_fresh_file_both_succeed() {
    for _ in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let barrier = Arc::new(Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let path = path.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    let mut store = Store::open(&path)?;
                    store.create_run(&new_run()).map(|_| ())
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        assert_eq!(user_version(&path), SCHEMA_VERSION);
        assert_eq!(Store::open(&path).unwrap().runs(10).unwrap().len(), 4);
    }
}

#[test]
fn missing_parent_dir_is_an_open_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join(DB_FILE);
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-dir"), "{err}");
}

/// A version-1 database as modix before 0.2 wrote it: a finished invocation
/// with its lifecycle rows, an abandoned one (NULL JSON columns) and messages.
fn v1_database(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(migrations::V1_FOR_TESTS).unwrap();
    conn.execute_batch(
        r#"
        INSERT INTO runs VALUES ('01R', 'old epic', 'w', '1.0.0', 'h', 'running', NULL, 'EXECUTING',
            '/p', '2025-01-01T00:00:00.000Z', '2025-01-01T00:00:01.000Z', NULL, NULL, NULL);
        INSERT INTO invocations (id, run_id, n, state, agent, attempt, lifecycle_fsm, argv, prompt,
            context, started_at, ended_at, status, outcome, stdout, stderr, parsed_output,
            validation_errors)
            VALUES (1, '01R', 1, 'PLANNING', 'planner', 1, 'execution_fsm_v1', '["p"]', 'same prompt',
            '{"a":1}', 't0', 't1', 'completed', 'output', '{"title":"x"}', '', '{"title":"x"}', '[]');
        INSERT INTO invocations (id, run_id, n, state, agent, attempt, lifecycle_fsm, argv, prompt,
            context, started_at, status)
            VALUES (2, '01R', 2, 'EXECUTING', 'executor', 1, 'execution_fsm_v1', '[]', 'same prompt',
            '{"b":2}', 't2', 'running');
        INSERT INTO invocation_transitions VALUES (1, 1, 't0', 'IDLE', 'start', 'EXECUTING');
        INSERT INTO invocation_transitions VALUES (1, 2, 't1', 'EXECUTING', 'success', 'COMPLETED');
        INSERT INTO invocation_transitions VALUES (2, 1, 't2', 'IDLE', 'start', 'EXECUTING');
        INSERT INTO transitions VALUES ('01R', 1, 't1', 'PLANNING', 'planned', 'EXECUTING', 1, NULL,
            'planner', 'ok', 0, 1);
        INSERT INTO messages (run_id, seq, kind, state, payload, at)
            VALUES ('01R', 1, 'task_spec', 'PLANNING', '{"title":"x"}', 't1');
        PRAGMA user_version = 1;
        "#,
    )
    .unwrap();
}

#[test]
fn a_version_1_database_is_migrated_with_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    v1_database(&path);
    let mut store = Store::open(&path).unwrap();
    assert_eq!(user_version(&path), SCHEMA_VERSION);
    // Version 8 dropped the index no query used.
    let index: Option<String> = store
        .conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE name = 'transitions_by_invocation'",
            [],
            |r| r.get(0),
        )
        .ok();
    assert_eq!(index, None);
    // Version 13 made the transitions their key's B-tree: no second index.
    let (sql, indexes): (String, i64) = store
        .conn
        .query_row(
            "SELECT sql, (SELECT count(*) FROM sqlite_master WHERE type = 'index' \
             AND tbl_name = 'transitions') FROM sqlite_master WHERE name = 'transitions'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(sql.ends_with("WITHOUT ROWID"), "{sql}");
    assert_eq!(indexes, 0);
    let first = store.invocation("01R", 1).unwrap();
    assert_eq!(first.prompt, "same prompt");
    assert_eq!(first.context, json!({"a": 1}));
    assert_eq!(first.parsed_output, Some(json!({"title": "x"})));
    let steps: Vec<&str> = first.lifecycle.iter().map(|l| l.to.as_str()).collect();
    assert_eq!(steps, ["EXECUTING", "COMPLETED"]);
    assert_eq!(store.transitions("01R").unwrap()[0].invocation, Some(1));
    let tail = store.run_tail("01R", 1).unwrap();
    assert_eq!(
        tail.latest_of("task_spec").unwrap().payload,
        json!({"title": "x"})
    );
    // The same text is stored once: both prompts, and the output and payload.
    assert_eq!(blobs_holding(&store, "same prompt"), 1);
    // The legacy running invocation is still there to be abandoned.
    let n = store
        .abandon_open_invocations("01R", |_, last| {
            Some((last.to_owned(), "abandoned".into(), "FAILED".into()))
        })
        .unwrap();
    assert_eq!(n, 1);
    assert_intact(&store);
}

/// Any standard SQLite must be able to read and integrity-check the
/// database: the system's `sqlite3` (Debian 12 has 3.40, older than the
/// bundled one) when it is installed, else the CHECK constraints' text.
#[test]
fn an_older_sqlite_finds_the_database_intact() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let mut store = Store::open(&path).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    let mut abandoned = new_invocation();
    abandoned.status = InvocationStatus::Abandoned;
    abandoned.outcome = None;
    abandoned.parsed_output = None;
    store.record_abandoned(&run.id, &abandoned).unwrap();
    let mut s = step("plan", "planned", "execute");
    s.invocation = Some(new_invocation());
    store.record_step(&run.id, &s).unwrap();
    drop(store);
    match std::process::Command::new("sqlite3")
        .arg(&path)
        .arg("PRAGMA integrity_check;")
        .output()
    {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(text.trim(), "ok", "system sqlite3 says: {text}");
        }
        Err(_) => {
            eprintln!("note: no system sqlite3; checking the constraints' text instead");
            let conn = rusqlite::Connection::open(&path).unwrap();
            let sql: String = conn
                .query_row(
                    "SELECT sql FROM sqlite_schema WHERE name = 'invocations'",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(sql.contains("validation_errors IS NULL OR json_valid(validation_errors)"));
        }
    }
}

#[test]
fn every_text_is_redacted_by_the_store_itself() {
    let secret = "sk-ant-api03-STORE-BOUNDARY-SECRET-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let mut store = redacting(&path, secret);
    let mut run = new_run();
    run.epic = format!("use {secret} please");
    let run = store.create_run(&run).unwrap();
    assert!(!run.epic.contains(secret), "{}", run.epic);
    let mut inv = new_invocation();
    inv.argv.push(secret.into());
    inv.prompt = format!("prompt {secret}");
    inv.context = json!({ "epic": secret });
    inv.stdout = format!("out {secret}").into_bytes();
    inv.stderr = [b"\xff bytes ".as_slice(), secret.as_bytes()].concat();
    inv.error = Some(format!("auth failed for key {secret}"));
    inv.parsed_output = Some(json!({ "summary": secret }));
    inv.validation_errors = vec![format!("/summary: {secret:?} is not valid")];
    let mut s = step("plan", "planned", "execute");
    s.invocation = Some(inv);
    s.transition.reason = Some(format!("agent failed: {secret}"));
    s.messages.push(NewMessage {
        kind: "feedback".into(),
        state: "plan".into(),
        payload: json!({ "text": secret, secret: 1 }),
    });
    store.record_step(&run.id, &s).unwrap();
    store
        .set_status(&run.id, RunStatus::Interrupted, Some(secret))
        .unwrap();
    drop(store);
    for entry in std::fs::read_dir(dir.path()).unwrap().flatten() {
        let bytes = std::fs::read(entry.path()).unwrap();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{:?} holds the key",
            entry.path()
        );
    }
}

#[test]
fn bytes_that_are_not_text_are_stored_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    let mut inv = new_invocation();
    inv.stdout = b"nul \0 and \xff".to_vec();
    let mut s = step("plan", "planned", "execute");
    s.invocation = Some(inv);
    store.record_step(&run.id, &s).unwrap();
    let bytes: Vec<u8> = store
        .conn
        .query_row(
            "SELECT b.bytes FROM invocations i JOIN blobs b ON b.id = i.stdout",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(bytes, b"nul \0 and \xff");
    assert_eq!(
        store.invocation(&run.id, 1).unwrap().stdout,
        "nul \0 and \u{fffd}"
    );
}

/// A cached statement is planned once: binding it again must not make
/// SQLite parse and plan it anew (see `Store::keep_plans`).
#[test]
fn cached_statements_are_not_planned_again_at_each_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    let mut tail = store.run_tail(&run.id, 0).unwrap();
    for (from, to) in [("plan", "a"), ("a", "b"), ("b", "c")] {
        let mut s = step(from, "go", to);
        s.invocation = Some(new_invocation());
        s.messages = vec![NewMessage {
            kind: "task_spec".into(),
            state: from.into(),
            payload: json!({ "to": to }),
        }];
        store.record_step(&run.id, &s).unwrap();
        store.refresh_tail(&mut tail).unwrap();
        let latest = tail.latest_of("task_spec").unwrap();
        assert_eq!(latest.payload, json!({ "to": to }));
    }
    // The statement `refresh_tail` ran three times, from the cache.
    let stmt = store
        .conn
        .prepare_cached(&super::context::new_messages_sql())
        .unwrap();
    assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0);
    drop(stmt);
    let ro = Store::open_read_only(&db(&dir)).unwrap();
    let qpsg = rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG;
    assert!(ro.conn.db_config(qpsg).unwrap());
}

#[test]
fn a_run_tail_reads_only_its_own_new_messages_by_the_primary_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let a = store.create_run(&new_run()).unwrap();
    let b = store.create_run(&new_run()).unwrap();
    let output = |state: &str, n: i64| NewMessage {
        kind: "test_result".into(),
        state: state.into(),
        payload: json!({ "n": n }),
    };
    let mut s = step("plan", "planned", "execute");
    s.messages.push(output("plan", 1));
    store.record_step(&a.id, &s).unwrap();
    let mut tail = store.run_tail(&a.id, 1).unwrap();
    let states = ["execute", "test", "execute", "test"];
    for (i, w) in states.windows(2).enumerate() {
        // The other run writes between each of this one's steps.
        let mut other = step(if i == 0 { "plan" } else { w[0] }, "next", w[1]);
        other.messages.push(output(w[0], 100));
        store.record_step(&b.id, &other).unwrap();
        let mut s = step(w[0], "next", w[1]);
        s.messages.push(output(w[0], i as i64 + 2));
        s.messages.push(NewMessage {
            kind: "feedback".into(),
            state: w[0].into(),
            payload: json!({ "text": "again" }),
        });
        store.record_step(&a.id, &s).unwrap();
        store.refresh_tail(&mut tail).unwrap();
        let seq = i as u32 + 2;
        let last = tail.messages_at(seq).expect("the latest step is held");
        assert_eq!(last.len(), 2);
        assert!(last.iter().all(|m| m.run_id == a.id && m.seq == seq));
        assert!(tail.messages_at(seq - 1).is_none());
    }
    let latest: Vec<(String, i64)> = tail
        .latest_outputs()
        .map(|m| (m.state.clone(), m.payload["n"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        latest,
        [
            ("execute".into(), 4),
            ("plan".into(), 1),
            ("test".into(), 3)
        ]
    );
    // A tail found afresh agrees with the one kept up to date.
    let fresh = store.run_tail(&a.id, 4).unwrap();
    let ids = |t: &RunTail| t.latest_outputs().map(|m| m.id).collect::<Vec<_>>();
    assert_eq!(ids(&fresh), ids(&tail));
    assert_eq!(fresh.messages_at(4).unwrap(), tail.messages_at(4).unwrap());
    // The refresh walks the newest messages by the primary key, not the
    // run's whole index range.
    let plan: String = store
        .conn
        .query_row(
            &format!("EXPLAIN QUERY PLAN {}", super::context::new_messages_sql()),
            params![a.id, 0],
            |row| row.get(3),
        )
        .unwrap();
    assert!(plan.contains("INTEGER PRIMARY KEY (rowid>?)"), "{plan}");
}

/// A tail kept by the steps this store records (`record_step_tailed`)
/// holds what a tail read afresh from the database holds — ids, redacted
/// payloads, the latest step — and a message of the run written by anyone
/// else in between is still read.
#[test]
fn a_tail_kept_by_its_own_steps_agrees_with_one_read_afresh() {
    let secret = "sk-ant-api03-TAIL-KEPT-IN-MEMORY-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let mut store = redacting(&db(&dir), secret);
    let a = store.create_run(&new_run()).unwrap();
    let b = store.create_run(&new_run()).unwrap();
    let message = |kind: &str, state: &str, payload: serde_json::Value| NewMessage {
        kind: kind.into(),
        state: state.into(),
        payload,
    };
    let same = |kept: &RunTail, store: &Store, seq: u32| {
        let fresh = store.run_tail(&a.id, seq).unwrap();
        let all = |t: &RunTail| {
            let outputs: Vec<MessageRecord> = t.latest_outputs().cloned().collect();
            let kinds: Vec<Option<MessageRecord>> = ["test_result", "feedback", "note"]
                .iter()
                .map(|k| t.latest_of(k).cloned())
                .collect();
            let notes: Vec<MessageRecord> = t.notes_after(0).cloned().collect();
            (outputs, kinds, notes, t.messages_at(seq).map(<[_]>::to_vec))
        };
        assert_eq!(all(kept), all(&fresh));
        assert_eq!(kept.watermark, fresh.watermark);
    };
    let mut tail = store.run_tail(&a.id, 0).unwrap();
    let states = ["plan", "execute", "test", "execute", "test"];
    for (i, w) in states.windows(2).enumerate() {
        let seq = i as u32 + 1;
        // Another run writes between this one's steps: not this tail's.
        let mut other = step(if i == 0 { "plan" } else { w[0] }, "next", w[1]);
        other
            .messages
            .push(message("test_result", w[0], json!({ "n": 100 })));
        store.record_step(&b.id, &other).unwrap();
        let mut s = step(w[0], "next", w[1]);
        s.messages.push(message(
            "test_result",
            w[0],
            json!({ "n": seq, "log": format!("key {secret}") }),
        ));
        s.messages
            .push(message("feedback", w[0], json!({ "text": "again" })));
        store
            .record_step_tailed(&mut tail, &s)
            .unwrap()
            .1
            .wait()
            .unwrap();
        assert!(tail.fresh, "nothing else of the run was written");
        let kept = tail.messages_at(seq).expect("the step just recorded");
        assert_eq!(kept.len(), 2);
        assert!(!kept[0].payload["log"].as_str().unwrap().contains(secret));
        same(&tail, &store, seq);
        store.refresh_tail(&mut tail).unwrap();
    }
    // A note of the run written by someone else (here, a step recorded
    // without this tail) after the tail was read: the next step is not
    // taken as current, and the refresh reads both.
    let mut note = step("test", "noted", "test");
    note.messages
        .push(message("note", "test", json!({ "text": "look" })));
    store.record_step(&a.id, &note).unwrap();
    let mut s = step("test", "next", "execute");
    s.messages
        .push(message("test_result", "test", json!({ "n": 6 })));
    store
        .record_step_tailed(&mut tail, &s)
        .unwrap()
        .1
        .wait()
        .unwrap();
    assert!(!tail.fresh);
    assert!(tail.latest_of("note").is_none(), "not read yet");
    store.refresh_tail(&mut tail).unwrap();
    assert_eq!(tail.latest_of("note").unwrap().payload["text"], "look");
    same(&tail, &store, 6);
}

/// A run's steps recorded by one store one after the other read nothing
/// back of where the run is; anything written in between — by another
/// connection, in this process or another, or by this store outside its
/// steps — sends the next step back to the database, so a step from the
/// wrong state is still a conflict and numbers still follow on.
#[test]
fn a_step_reads_the_run_back_only_when_something_was_written_since_the_last() {
    use super::record::POSITION_READS;
    let reads = || POSITION_READS.with(std::cell::Cell::get);
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let a = store.create_run(&new_run()).unwrap();
    let mut tail = store.run_tail(&a.id, 0).unwrap();
    let with_invocation = |from: &str, to: &str| {
        let mut s = step(from, "next", to);
        s.invocation = Some(new_invocation());
        s
    };
    let record = |store: &mut Store, tail: &mut RunTail, s: &Step| {
        let before = reads();
        let result = store.record_step_tailed(tail, s).map(|(r, landing)| {
            landing.wait().unwrap();
            r
        });
        (result, reads() - before)
    };
    let (first, read) = record(&mut store, &mut tail, &with_invocation("plan", "execute"));
    assert_eq!(
        (first.unwrap().seq, read),
        (1, 1),
        "the first step reads it"
    );
    let (second, read) = record(&mut store, &mut tail, &with_invocation("execute", "test"));
    assert_eq!((second.unwrap().seq, read), (2, 0), "nothing written since");
    let (third, read) = record(&mut store, &mut tail, &step("test", "next", "execute"));
    assert_eq!((third.unwrap().seq, read), (3, 0));

    // This store, outside its steps: an invocation abandoned takes n = 3.
    store.record_abandoned(&a.id, &new_invocation()).unwrap();
    let (fourth, read) = record(&mut store, &mut tail, &with_invocation("execute", "test"));
    let fourth = fourth.unwrap();
    assert_eq!((fourth.seq, fourth.invocation, read), (4, Some(4), 1));

    // Another connection writes elsewhere: read again, and right.
    let mut other = Store::open(&db(&dir)).unwrap();
    let b = other.create_run(&new_run()).unwrap();
    other
        .record_step(&b.id, &step("plan", "next", "execute"))
        .unwrap();
    let (fifth, read) = record(&mut store, &mut tail, &with_invocation("test", "execute"));
    let fifth = fifth.unwrap();
    assert_eq!((fifth.seq, fifth.invocation, read), (5, Some(5), 1));
    let (_, read) = record(&mut store, &mut tail, &step("execute", "next", "test"));
    assert_eq!(read, 0);

    // Another connection moves the run itself: the stale step is refused
    // and writes nothing.
    other
        .record_step(&a.id, &step("test", "next", "review"))
        .unwrap();
    let (stale, read) = record(&mut store, &mut tail, &with_invocation("test", "execute"));
    let err = stale.unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");
    assert_eq!(read, 1);
    assert_eq!(store.transitions(&a.id).unwrap().len(), 7);
    assert_eq!(store.invocations(&a.id).unwrap().len(), 5);
    // And after a refused step, nothing is taken as known.
    store.refresh_tail(&mut tail).unwrap();
    let (eighth, read) = record(&mut store, &mut tail, &with_invocation("review", "done"));
    assert_eq!((eighth.unwrap().seq, read), (8, 1));
}

/// The blob ids of the last invocation's stdout and answer.
fn output_blobs(store: &Store) -> (Option<i64>, Option<i64>) {
    store
        .conn
        .query_row(
            "SELECT stdout, parsed_output FROM invocations ORDER BY id DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

#[test]
fn an_answer_that_is_its_stdout_is_stored_once_and_reads_back_as_it_was() {
    let secret = "sk-ant-api03-ANSWER-IS-STDOUT-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let mut store = redacting(&db(&dir), secret);
    let run = store.create_run(&new_run()).unwrap();
    let answer = json!({"summary": format!("used {secret}"), "n": 1.5, "list": [1, null]});
    // (stdout, the answer as judged, whether they are one blob)
    let cases: Vec<(String, Value, bool)> = vec![
        // The document as a command prints it: other order, spacing, escapes.
        (
            format!("  {{\"n\": 1.5, \"list\": [1, null], \"summary\": \"used {secret}\"}}\n"),
            answer.clone(),
            true,
        ),
        (format!("{answer:#}"), answer.clone(), true),
        // The answer was taken out of an envelope, or out of prose.
        (json!({"result": answer}).to_string(), answer.clone(), false),
        (
            format!("Done.\n```json\n{answer}\n```\n"),
            answer.clone(),
            false,
        ),
        // A null the schema allows was dropped from it.
        (r#"{"a": 1, "b": null}"#.to_owned(), json!({"a": 1}), false),
        // Cut at the capture limit: not a document at all.
        (answer.to_string()[..20].to_owned(), answer.clone(), false),
    ];
    let mut seq = 0;
    for (stdout, parsed, shared) in cases {
        let mut inv = new_invocation();
        inv.stdout = stdout.clone().into_bytes();
        inv.parsed_output = Some(parsed.clone());
        let mut s = step("plan", "again", "plan");
        s.invocation = Some(inv);
        store.record_step(&run.id, &s).unwrap();
        seq += 1;
        let (out, answer_blob) = output_blobs(&store);
        assert_eq!(out == answer_blob, shared, "{stdout}");
        let i = store.invocations(&run.id).unwrap().pop().unwrap();
        assert_eq!(i.n, seq);
        assert_eq!(
            i.parsed_output,
            Some(
                serde_json::from_str(
                    &parsed
                        .to_string()
                        .replace(secret, "[REDACTED:ANTHROPIC_API_KEY]")
                )
                .unwrap()
            ),
            "{stdout}"
        );
    }
    assert_eq!(blobs_with(&store, secret), 0, "a blob holds the secret");
}

/// The output message that carries the invocation's answer shares its
/// blob, redacted once; a message with another payload gets its own.
#[test]
fn the_answer_and_its_output_message_are_one_blob() {
    let secret = "sk-ant-api03-ANSWER-AND-MESSAGE-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let mut store = redacting(&db(&dir), secret);
    let run = store.create_run(&new_run()).unwrap();
    let answer = json!({ "summary": format!("done with {secret}"), "n": 1 });
    let mut inv = new_invocation();
    inv.parsed_output = Some(answer.clone());
    let mut s = step("plan", "planned", "execute");
    s.invocation = Some(inv);
    s.messages.push(NewMessage {
        kind: "task_spec".into(),
        state: "plan".into(),
        payload: answer,
    });
    s.messages.push(NewMessage {
        kind: "feedback".into(),
        state: "plan".into(),
        payload: json!({ "text": secret }),
    });
    let mut tail = store.run_tail(&run.id, 0).unwrap();
    store
        .record_step_tailed(&mut tail, &s)
        .unwrap()
        .1
        .wait()
        .unwrap();
    let ids: Vec<(i64, i64)> = store
        .conn
        .prepare("SELECT m.payload, i.parsed_output FROM messages m, invocations i ORDER BY m.id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        ids[0].0, ids[0].1,
        "the output message is the answer's blob"
    );
    assert_ne!(ids[1].0, ids[1].1);
    let kept = tail.latest_of("task_spec").unwrap().clone();
    assert!(!kept.payload["summary"].as_str().unwrap().contains(secret));
    assert_eq!(
        store.run_tail(&run.id, 1).unwrap().latest_of("task_spec"),
        Some(&kept)
    );
    assert_eq!(blobs_with(&store, secret), 0, "a blob holds the secret");
}

#[test]
fn a_state_visited_again_stores_only_what_changed_of_its_context_and_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    let big = "the task spec, the same at every visit ".repeat(50);
    let blobs = |store: &Store| -> (i64, i64) {
        store
            .conn
            .query_row("SELECT count(*), sum(size) FROM blobs", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap()
    };
    let mut sizes = Vec::new();
    for (attempt, (from, to)) in [("plan", "plan"), ("plan", "plan"), ("plan", "done")]
        .into_iter()
        .enumerate()
    {
        let mut s = step(from, "again", to);
        let mut inv = new_invocation();
        inv.attempt = attempt as u32 + 1;
        let verdict = json!({"passed": false, "summary": format!("verdict {attempt}")});
        inv.context = json!({
            "epic": "add login",
            "task_spec": { "text": big },
            "attempt": attempt + 1,
            "feedback": format!("try again ({attempt})"),
            "came_from": {"seq": attempt, "state": "plan", "event": "again", "reason": null,
                          "output": verdict},
            "outputs": {"plan": {"schema": "test_result", "seq": attempt, "output": verdict}},
        });
        s.invocation = Some(inv);
        store.record_step(&run.id, &s).unwrap();
        sizes.push(blobs(&store));
    }
    // A later visit adds no blob: its step part is in its row, the rest
    // (the task spec), its command line and lifecycle were stored at the
    // first.
    for w in sizes.windows(2) {
        assert_eq!(w[1], w[0], "{sizes:?}");
    }
    let verdict = json!({"passed": false, "summary": "verdict 2"});
    let whole = json!({
        "attempt": 3,
        "epic": "add login",
        "feedback": "try again (2)",
        "task_spec": { "text": big },
        "came_from": {"seq": 2, "state": "plan", "event": "again", "reason": null,
                      "output": verdict},
        "outputs": {"plan": {"schema": "test_result", "seq": 2, "output": verdict}},
    });
    let inv = store.invocation(&run.id, 3).unwrap();
    assert_eq!(inv.context, whole);
    // The previous output is in the row once (in `outputs`), not twice.
    let now: String = store
        .conn
        .query_row(
            "SELECT context_now FROM invocations WHERE run_id = ?1 AND n = 3",
            [&run.id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(now.matches("verdict 2").count(), 1, "{now}");
    // A row written before store v9 has its step part in a blob: read the same.
    store
        .conn
        .execute_batch(&format!(
            "INSERT INTO blobs (hash, size, text) SELECT 'old', length(context_now), \
             context_now FROM invocations WHERE run_id = '{0}' AND n = 3; \
             UPDATE invocations SET context_step = (SELECT id FROM blobs WHERE hash = 'old'), \
             context_now = NULL WHERE run_id = '{0}' AND n = 3;",
            run.id
        ))
        .unwrap();
    let inv = store.invocation(&run.id, 3).unwrap();
    assert_eq!(inv.context, whole);
    // The lifecycle is read back with its times: the first step at the
    // start, the last at the end.
    let steps: Vec<(&str, &str)> = inv
        .lifecycle
        .iter()
        .map(|l| (l.from.as_str(), l.at.as_str()))
        .collect();
    let ended = inv.ended_at.as_deref().unwrap();
    assert_eq!(
        steps,
        [("IDLE", inv.started_at.as_str()), ("EXECUTING", ended)]
    );
    assert_eq!(
        inv.lifecycle.iter().map(|l| l.seq).collect::<Vec<_>>(),
        [1, 2]
    );
}

#[test]
fn rows_written_before_schema_6_read_back_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    let mut s = step("plan", "planned", "done");
    s.invocation = Some(new_invocation());
    store.record_step(&run.id, &s).unwrap();
    // As an older modix wrote it: the whole package in `context`, each
    // lifecycle step with its own seq and time.
    let whole = r#"[{"seq":1,"at":"2026-01-01T00:00:00.000Z","from":"IDLE","event":"start","to":"EXECUTING"},{"seq":2,"at":"2026-01-01T00:00:09.000Z","from":"EXECUTING","event":"exit","to":"COMPLETED"}]"#;
    store
        .conn
        .execute_batch(&format!(
            "INSERT INTO blobs (hash, size, text) VALUES ('old', 23, '{{\"epic\":\"old\",\"attempt\":1}}');
             UPDATE invocations SET lifecycle = '{whole}', context_step = NULL,
               lifecycle_ref = NULL, argv = json_array('old', 'argv'), argv_ref = NULL,
               context = (SELECT id FROM blobs WHERE hash = 'old');"
        ))
        .unwrap();
    let inv = store.invocation(&run.id, 1).unwrap();
    assert_eq!(inv.context, json!({"epic": "old", "attempt": 1}));
    assert_eq!(inv.lifecycle[1].at, "2026-01-01T00:00:09.000Z");
    assert_eq!(inv.lifecycle[1].to, "COMPLETED");
    assert_eq!(inv.argv, ["old", "argv"]);
}

/// `history` counts a run's steps and invocations by their last number and
/// reads a long run's tail from a seq on: both hold for a forked run too
/// (it copies a prefix of each), and abandoned invocations count.
#[test]
fn counts_by_last_number_and_tails_hold_for_forks() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    let mut at = "plan".to_owned();
    for i in 0..6 {
        let to = format!("s{i}");
        let mut s = step(&at, "e", &to);
        s.invocation = (i % 2 == 0).then(new_invocation);
        store.record_step(&run.id, &s).unwrap();
        if i == 3 {
            store.record_abandoned(&run.id, &new_invocation()).unwrap();
        }
        at = to;
    }
    let summary = |store: &Store, id: &str| {
        let all = store.runs_matching(&[], None, None).unwrap();
        let r = all.into_iter().find(|r| r.run.id == id).unwrap();
        (r.transitions, r.invocations)
    };
    assert_eq!(summary(&store, &run.id), (6, 4));
    assert_eq!(store.transition_count(&run.id).unwrap(), 6);
    let tail: Vec<u32> = store
        .transitions_after(&run.id, 4)
        .unwrap()
        .iter()
        .map(|t| t.seq)
        .collect();
    assert_eq!(tail, vec![5, 6]);

    let fork = NewRun {
        id: Some(Store::new_run_id()),
        ..new_run()
    };
    let forked = store.fork_run(&run.id, 3, &fork, None).unwrap();
    let copied = (
        store.transitions(&forked.id).unwrap().len() as u32,
        store.invocations(&forked.id).unwrap().len() as u32,
    );
    assert_eq!(summary(&store, &forked.id), copied);
    assert_eq!(store.transition_count(&forked.id).unwrap(), 3);
    assert_eq!(store.transition_count("01NOPE").unwrap(), 0);

    // Neighbours in id order, whether or not the id itself is recorded.
    let (first, second) = if run.id < forked.id {
        (&run.id, &forked.id)
    } else {
        (&forked.id, &run.id)
    };
    assert_eq!(
        store.run_id_neighbours(first).unwrap(),
        (None, Some(second.clone()))
    );
    assert_eq!(
        store.run_id_neighbours(second).unwrap(),
        (Some(first.clone()), None)
    );
    assert_eq!(store.run_count().unwrap(), 2);
}

#[test]
fn a_blob_of_a_transaction_that_did_not_commit_is_never_taken_as_stored() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    // Written, then rolled back: its id must not be remembered.
    {
        let w = store.write_tx().unwrap();
        w.blob(b"plan the epic").unwrap();
    }
    invoking_step(&mut store, &run.id, "plan", "a");
    // Committed: found again without a lookup, and the same row.
    invoking_step(&mut store, &run.id, "a", "b");
    assert_prompt_stored_once(&store, &run.id);
}

/// Records a step from `from` to `to` with an invocation.
fn invoking_step(store: &mut Store, run_id: &str, from: &str, to: &str) {
    let mut s = step(from, "go", to);
    s.invocation = Some(new_invocation());
    store.record_step(run_id, &s).unwrap();
}

/// The two invocations' prompt is one row, and each reads it back.
fn assert_prompt_stored_once(store: &Store, run_id: &str) {
    assert_eq!(blobs_holding(store, "plan the epic"), 1);
    for n in [1, 2] {
        assert_eq!(store.invocation(run_id, n).unwrap().prompt, "plan the epic");
    }
    assert_intact(store);
}

/// A text another connection stored (so this one has not learnt its id)
/// is found, not stored again, and read back the same.
#[test]
fn a_text_stored_by_another_connection_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = Store::open(&db(&dir)).unwrap();
    let run = first.create_run(&new_run()).unwrap();
    invoking_step(&mut first, &run.id, "plan", "a");
    let mut second = Store::open(&db(&dir)).unwrap();
    invoking_step(&mut second, &run.id, "a", "b");
    assert_prompt_stored_once(&second, &run.id);
}

#[test]
fn what_steps_did_to_the_workspace_is_stored_once_when_it_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    let same = json!({"commit": "c0ffee", "empty": true, "files": [], "tree": "7ee"});
    for (from, to) in [("plan", "a"), ("a", "b")] {
        let mut s = step(from, "go", to);
        let mut inv = new_invocation();
        inv.changes = Some(same.clone());
        s.invocation = Some(inv);
        store.record_step(&run.id, &s).unwrap();
    }
    let text = serde_json::to_string(&same).unwrap();
    assert_eq!(blobs_holding(&store, &text), 1);
    for n in [1, 2] {
        assert_eq!(
            store.invocation(&run.id, n).unwrap().changes,
            Some(same.clone())
        );
    }
    // A change found after the fact (a resume's) is written in the row.
    let later = json!({"discarded": ["x.txt"]});
    store.set_invocation_changes(&run.id, 2, &later).unwrap();
    assert_eq!(
        store.invocation_changes(&run.id).unwrap(),
        vec![(1, same), (2, later.clone())]
    );
    assert_eq!(store.invocation(&run.id, 2).unwrap().changes, Some(later));
}

/// A step whose message is `payload`, the output of `state`.
fn output_step(from: &str, to: &str, state: &str, payload: Value) -> Step {
    let mut s = step(from, "go", to);
    s.messages = vec![NewMessage {
        kind: "test_result".into(),
        state: state.into(),
        payload,
    }];
    s
}

/// Records the step `test -go-> done` with an invocation that read
/// `context` (its texts made with `quotes`, as the engine makes them), and
/// returns the package's step part as the store keeps it.
fn record_package(store: &mut Store, run_id: &str, context: &Value, quotes: &Quotes<'_>) -> String {
    let mut inv = new_invocation();
    inv.context = context.clone();
    inv.texts = Some(
        store
            .input_texts(&inv.argv, &inv.prompt, context, quotes)
            .unwrap(),
    );
    let mut s = step("test", "go", "done");
    s.invocation = Some(inv);
    store.record_step(run_id, &s).unwrap();
    store
        .conn
        .query_row(
            "SELECT context_now FROM invocations ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn a_package_refers_to_the_messages_it_quotes_and_reads_back_whole() {
    let secret = "sk-ant-api03-QUOTED-PAYLOAD-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let mut store = redacting(&db(&dir), secret);
    let run = store.create_run(&new_run()).unwrap();
    let plan = json!({"summary": format!("the plan, {}", "long ".repeat(400)), "n": 1.5});
    let work = json!({"passed": false, "summary": format!("key {secret}")});
    let steps = [
        output_step("plan", "execute", "plan", plan),
        output_step("execute", "test", "execute", work),
    ];
    for s in &steps {
        store.record_step(&run.id, s).unwrap();
    }
    // As the engine hands them on: the payloads as they read back (the
    // secret redacted), with their blobs.
    let messages = store.messages(&run.id).unwrap();
    let entry = |m: &MessageRecord| json!({"schema": m.kind, "seq": m.seq, "output": m.payload});
    let history: Vec<Value> = messages
        .iter()
        .map(|m| json!({"seq": m.seq, "kind": m.kind, "state": m.state, "payload": m.payload}))
        .collect();
    let mut context = json!({
        "epic": "e",
        "attempt": 2,
        "came_from": {"state": "execute", "seq": 2, "event": "go", "reason": null,
                      "output": messages[1].payload},
        "outputs": {"plan": entry(&messages[0]), "execute": entry(&messages[1])},
        "history": history,
    });
    // One output the package changed: not the message's, kept whole.
    context["history"][0]["payload"]["n"] = json!(2);
    fn quote(m: &MessageRecord) -> Quote<'_> {
        Quote {
            blob: m.payload_blob,
            seq: m.seq,
            kind: &m.kind,
            state: &m.state,
            payload: &m.payload,
        }
    }
    let quotes = Quotes {
        outputs: messages.iter().map(quote).collect(),
        history: messages.iter().map(quote).collect(),
    };
    let stored = record_package(&mut store, &run.id, &context, &quotes);

    assert_eq!(store.invocation(&run.id, 1).unwrap().context, context);
    let stored: Value = serde_json::from_str(&stored).unwrap();
    let blob = |i: usize| json!(messages[i].payload_blob);
    assert_eq!(stored["outputs"]["plan"].get("output"), None, "{stored}");
    assert_eq!(stored["outputs"]["plan"]["output_blob"], blob(0));
    assert_eq!(stored["outputs"]["execute"]["output_blob"], blob(1));
    assert_eq!(stored["history"][1]["payload_blob"], blob(1));
    assert_eq!(stored["history"][0]["payload"]["n"], json!(2), "{stored}");
    assert!(stored.to_string().len() < 2_500, "{stored}");
    assert_intact(&store);
}

#[test]
fn a_feedback_quoting_the_output_that_sent_the_work_back_is_stored_as_its_first_line() {
    let secret = "sk-ant-api03-QUOTED-FEEDBACK-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let mut store = redacting(&db(&dir), secret);
    let run = store.create_run(&new_run()).unwrap();
    let failures: Vec<String> = (0..60)
        .map(|i| format!("test {i} failed ({secret})"))
        .collect();
    let work = json!({"passed": false, "failures": failures, "summary": "many"});
    store
        .record_step(&run.id, &output_step("plan", "test", "test", work.clone()))
        .unwrap();
    let message = &store.messages(&run.id).unwrap()[0];
    // As the engine builds it: the output (its secret too) quoted whole,
    // after a line saying who sent the work back.
    let pretty = serde_json::to_string_pretty(&work).unwrap();
    let context = json!({
        "epic": "e",
        "attempt": 2,
        "came_from": {"state": "test", "seq": 1, "event": "go", "reason": secret,
                      "output": work},
        "outputs": {"test": {"schema": message.kind, "seq": 1, "output": work}},
        "feedback": format!("test sent the work back (go): {secret}\n{pretty}"),
    });
    let quotes = Quotes {
        outputs: vec![Quote {
            blob: message.payload_blob,
            seq: 1,
            kind: &message.kind,
            state: &message.state,
            payload: &message.payload,
        }],
        history: vec![],
    };
    let stored = record_package(&mut store, &run.id, &context, &quotes);

    assert!(stored.len() < 400, "{stored}");
    assert!(!stored.contains(secret), "{stored}");
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert!(stored["feedback"]["quoting_came_from_output"].is_string());
    // It reads back as the package was written, redacted as it was stored.
    let read = store.invocation(&run.id, 1).unwrap().context;
    assert_eq!(read, *store.redactor.redact_json(&context));
    assert!(!read.to_string().contains(secret));
    assert_eq!(read["came_from"]["output"], message.payload);
    assert_intact(&store);
}

#[test]
fn texts_made_while_the_agent_runs_are_stored_as_the_commit_would_store_them() {
    let secret = "sk-ant-api03-TEXTS-MADE-APART-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let mut store = redacting(&db(&dir), secret);
    let run = store.create_run(&new_run()).unwrap();
    let mut inv = new_invocation();
    inv.argv.push(secret.into());
    inv.prompt = format!("prompt {secret}");
    inv.context = json!({
        "epic": secret,
        "attempt": 2,
        "came_from": {"state": "plan", "seq": 1, "output": null},
        "outputs": {},
    });
    let made_apart = NewInvocation {
        texts: Some(
            store
                .input_texts(&inv.argv, &inv.prompt, &inv.context, &Quotes::default())
                .unwrap(),
        ),
        ..inv.clone()
    };
    for (i, inv) in [inv, made_apart].into_iter().enumerate() {
        let (from, to) = [("plan", "execute"), ("execute", "test")][i];
        let mut s = step(from, "go", to);
        s.invocation = Some(inv);
        store.record_step(&run.id, &s).unwrap();
    }
    let [a, b] = &store.invocations(&run.id).unwrap()[..] else {
        panic!("two invocations")
    };
    assert_eq!(
        (&a.argv, &a.prompt, &a.context),
        (&b.argv, &b.prompt, &b.context)
    );
    assert!(!format!("{:?}{}{}", b.argv, b.prompt, b.context).contains(secret));
    // The same rows: one blob each for the command line, prompt and package.
    let refs: Vec<(i64, i64, i64, Option<String>)> = store
        .conn
        .prepare("SELECT argv_ref, prompt, context, context_now FROM invocations ORDER BY n")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(refs[0], refs[1]);
    assert_intact(&store);
}

/// A FIFO, a directory or a device where the database or its log belongs is
/// refused at once, by name: SQLite would wait forever to read a FIFO.
#[test]
fn what_is_not_a_file_where_the_database_belongs_is_refused_at_once() {
    use nix::sys::stat::Mode;
    for (suffix, make) in [("", "fifo"), ("-wal", "fifo"), ("-shm", "dir"), ("", "dir")] {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        match make {
            "fifo" => nix::unistd::mkfifo(std::path::Path::new(&file), Mode::S_IRWXU).unwrap(),
            _ => std::fs::create_dir(&file).unwrap(),
        }
        let t0 = std::time::Instant::now();
        for read_only in [false, true] {
            let e = match read_only {
                false => Store::open(&path).unwrap_err(),
                true => Store::open_read_only(&path).unwrap_err(),
            };
            let text = e.to_string();
            let kind = if make == "fifo" {
                "a FIFO (named pipe)"
            } else {
                "a directory"
            };
            assert!(text.contains(&format!("is {kind}, not a file")), "{text}");
            assert!(
                suffix.is_empty() || text.contains(&format!("its `{suffix}` file")),
                "{text}"
            );
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    }
}

/// The messages of a run's last steps, found kind by kind from its newest
/// back, are exactly its messages of those steps in order — in a fork too,
/// whose copies and note come before its own steps'.
#[test]
fn the_messages_after_a_step_are_those_of_the_later_steps_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db(&dir)).unwrap();
    let run = store.create_run(&new_run()).unwrap();
    let kinds = ["task_spec", "test_result", "review"];
    let mut at = "plan".to_owned();
    let record = |store: &mut Store, run: &str, at: &mut String, i: usize| {
        let to = format!("s{i}");
        let mut s = step(at, "e", &to);
        // 0, 1 or 2 messages a step, of kinds in turn.
        for k in 0..i % 3 {
            s.messages.push(NewMessage {
                kind: kinds[(i + k) % 3].into(),
                state: at.clone(),
                payload: json!({"step": i, "k": k}),
            });
        }
        store.record_step(run, &s).unwrap();
        *at = to;
    };
    for i in 0..9 {
        record(&mut store, &run.id, &mut at, i);
    }
    let fork = NewRun {
        id: Some(Store::new_run_id()),
        ..new_run()
    };
    let forked = store
        .fork_run(&run.id, 5, &fork, Some(json!("again")))
        .unwrap();
    let mut at = store.transitions(&forked.id).unwrap()[4].to.clone();
    for i in 9..14 {
        record(&mut store, &forked.id, &mut at, i);
    }
    for id in [&run.id, &forked.id] {
        let all = store.messages(id).unwrap();
        let last = store.transition_count(id).unwrap();
        for after in 0..=last + 1 {
            let mut got = Vec::new();
            store
                .each_message(id, after, |m| {
                    got.push((m.id, m.seq));
                    Ok::<_, std::convert::Infallible>(())
                })
                .unwrap()
                .unwrap();
            let want: Vec<(i64, u32)> = all
                .iter()
                .filter(|m| m.seq > after)
                .map(|m| (m.id, m.seq))
                .collect();
            assert_eq!(got, want, "run {id} after {after}");
        }
    }
}
