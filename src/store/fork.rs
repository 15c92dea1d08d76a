//! A run branched off another at one of its steps (`modix fork`): a new
//! run whose record is the original's up to that step — its transitions,
//! the invocations behind them and the messages they left, copied in one
//! transaction (the texts are content-addressed blobs, so nothing large is
//! copied) — with a link to where it came from, ready to resume.

use rusqlite::params;
use serde_json::{Value, json};

use super::runs::{NewRun, Run};
use super::{Ctx, RunStatus, Store, StoreError, Writer, now};

/// Every column of `table` but the ones `skip` names, comma-separated.
fn columns(w: &Writer<'_>, table: &str, skip: &[&str]) -> Result<String, StoreError> {
    let mut stmt =
        w.tx.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
            .ctx(w.path, "reading a table's columns")?;
    let names: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .ctx(w.path, "reading a table's columns")?;
    Ok(names
        .into_iter()
        .filter(|n| !skip.contains(&n.as_str()))
        .collect::<Vec<_>>()
        .join(", "))
}

impl Store {
    /// Creates run `new` as a copy of run `source` up to step `seq`, in
    /// state `seq`'s target, status interrupted (a resume continues it), and
    /// `note` (a person's word for the next agents) as a message of step
    /// `seq`.
    pub fn fork_run(
        &mut self,
        source: &str,
        seq: u32,
        new: &NewRun,
        note: Option<Value>,
    ) -> Result<Run, StoreError> {
        let id = new.id.clone().unwrap_or_else(Store::new_run_id);
        let w = self.write_tx()?;
        let state: String =
            w.tx.query_row(
                "SELECT to_state FROM transitions WHERE run_id = ?1 AND seq = ?2",
                params![source, seq],
                |r| r.get(0),
            )
            .ctx(w.path, "finding the step to fork at")?;
        let at = now();
        let forked_from = json!({ "run_id": source, "seq": seq }).to_string();
        w.tx.execute(
            "INSERT INTO runs (id, epic, workflow_id, workflow_version, workflow_hash, status, \
             status_reason, current_state, workdir, created_at, updated_at, workspace, forked_from, \
             overrides) \
             SELECT ?1, epic, workflow_id, workflow_version, workflow_hash, ?2, ?3, ?4, ?5, ?6, ?6, \
             ?7, ?8, overrides FROM runs WHERE id = ?9",
            params![
                id,
                RunStatus::Interrupted,
                format!("forked from run {source} at step {seq}"),
                state,
                new.workdir,
                at,
                new.workspace.as_ref().map(Value::to_string),
                forked_from,
                source
            ],
        )
        .ctx(w.path, "creating the forked run")?;
        copy_rows(&w, source, &id, seq)?;
        w.retally_usage(Some(&id))?;
        if let Some(note) = note {
            let payload = w.blob_json(&note)?;
            w.tx.execute(
                "INSERT INTO messages (run_id, seq, kind, state, payload, at) \
                 VALUES (?1, ?2, 'note', ?3, ?4, ?5)",
                params![id, seq, state, payload, at],
            )
            .ctx(w.path, "recording the fork's note")?;
        }
        w.commit("committing the forked run")?;
        self.run(&id)
    }
}

/// The transitions up to `seq`, the invocations up to the last of theirs
/// (abandoned and retried ones between included), the messages up to `seq`.
fn copy_rows(w: &Writer<'_>, source: &str, to: &str, seq: u32) -> Result<(), StoreError> {
    let last_n: u32 =
        w.tx.query_row(
            "SELECT coalesce(max(i.n), 0) FROM transitions t JOIN invocations i \
             ON i.id = t.invocation_id WHERE t.run_id = ?1 AND t.seq <= ?2",
            params![source, seq],
            |r| r.get(0),
        )
        .ctx(w.path, "finding the invocations to copy")?;
    let inv = columns(w, "invocations", &["id", "run_id"])?;
    w.tx.execute(
        &format!(
            "INSERT INTO invocations (run_id, {inv}) SELECT ?1, {inv} FROM invocations \
             WHERE run_id = ?2 AND n <= ?3 ORDER BY n"
        ),
        params![to, source, last_n],
    )
    .ctx(w.path, "copying invocations")?;
    let tr = columns(w, "transitions", &["run_id", "invocation_id"])?;
    w.tx.execute(
        &format!(
            "INSERT INTO transitions (run_id, invocation_id, {tr}) \
             SELECT ?1, (SELECT c.id FROM invocations c WHERE c.run_id = ?1 AND c.n = \
             (SELECT o.n FROM invocations o WHERE o.id = t.invocation_id)), {tr} \
             FROM transitions t WHERE t.run_id = ?2 AND t.seq <= ?3 ORDER BY t.seq"
        ),
        params![to, source, seq],
    )
    .ctx(w.path, "copying transitions")?;
    let msg = columns(w, "messages", &["id", "run_id"])?;
    w.tx.execute(
        &format!(
            "INSERT INTO messages (run_id, {msg}) SELECT ?1, {msg} FROM messages \
             WHERE run_id = ?2 AND seq <= ?3 ORDER BY id"
        ),
        params![to, source, seq],
    )
    .ctx(w.path, "copying messages")?;
    Ok(())
}
