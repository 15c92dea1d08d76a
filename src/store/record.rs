//! Writes that happen while a run executes: starting an agent invocation,
//! recording a workflow step (finishing the invocation, its messages, the
//! transition and the run's new state in ONE transaction), and abandoning
//! invocations a crashed process left open.
//!
//! One transaction per step is what makes resume trustworthy: after a crash
//! the database holds either the whole step or none of it.

use rusqlite::{OptionalExtension, Transaction, params};
use serde::Serialize;
use serde_json::Value;

use super::query::{TRANSITION_COLUMNS, TransitionRecord, transition_from_row};
use super::{Ctx, RunStatus, Store, StoreError, now, text_enum_sql, to_i64};
use crate::fsm::Outcome;
use std::path::Path;

/// Row id of an invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct InvocationId(pub i64);

/// What is known when an agent process is about to start.
#[derive(Debug, Clone)]
pub struct NewInvocation {
    pub run_id: String,
    pub state: String,
    pub agent: String,
    pub attempt: u32,
    /// Name of the agent lifecycle machine (IDLE → EXECUTING → COMPLETED/FAILED).
    pub lifecycle_fsm: String,
    /// The lifecycle's first step as (from, event, to), recorded with the start.
    pub lifecycle_start: (String, String, String),
    /// Command line, already redacted by the caller.
    pub argv: Vec<String>,
    pub prompt: String,
    pub context: Value,
}

/// How an invocation ended, per its lifecycle.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum InvocationStatus {
    Running,
    Completed,
    Failed,
    /// Left running by a process that died; closed by
    /// [`Store::abandon_open_invocations`].
    Abandoned,
}

text_enum_sql!(InvocationStatus);

/// How an invocation finished.
#[derive(Debug, Clone)]
pub struct InvocationEnd {
    /// Completed or Failed (Running is refused).
    pub status: InvocationStatus,
    pub outcome: Option<Outcome>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: Option<u64>,
    /// Possibly truncated; `*_bytes` are the full sizes.
    pub stdout: String,
    pub stderr: String,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub parsed_output: Option<Value>,
    pub validation_errors: Vec<String>,
    /// Lifecycle transitions after IDLE -start-> EXECUTING, as (from, event, to).
    pub lifecycle: Vec<(String, String, String)>,
}

/// The workflow transition of a step.
#[derive(Debug, Clone)]
pub struct NewTransition {
    pub from: String,
    pub event: String,
    pub to: String,
    pub attempt: u32,
    /// The retry bound that applied, if any.
    pub bound: Option<u32>,
    pub agent: Option<String>,
    pub reason: Option<String>,
    /// The workflow sent the run somewhere other than the event's target
    /// (e.g. a bound was exhausted).
    pub redirected: bool,
}

/// A message produced by a step, e.g. the task spec a plan state wrote.
#[derive(Debug, Clone)]
pub struct NewMessage {
    /// `task_spec`, `execution_result`, `test_result`, `feedback`, …
    pub kind: String,
    pub state: String,
    pub payload: Value,
}

/// Everything one workflow step writes, committed together.
#[derive(Debug, Clone)]
pub struct Step {
    pub transition: NewTransition,
    /// The invocation that produced the event, and how it ended.
    pub invocation: Option<(InvocationId, InvocationEnd)>,
    pub messages: Vec<NewMessage>,
    /// The run's status after the step (terminal when `to` is final).
    pub run_status: RunStatus,
}

fn json(path: &Path, value: &impl Serialize) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Invalid {
        path: path.to_path_buf(),
        message: format!("cannot encode JSON: {e}"),
    })
}

/// Current state and status of `run_id`, or NotFound.
fn run_state(
    tx: &Transaction<'_>,
    path: &Path,
    run_id: &str,
) -> Result<(String, RunStatus), StoreError> {
    tx.query_row(
        "SELECT current_state, status FROM runs WHERE id = ?1",
        [run_id],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
    .optional()
    .ctx(path, "reading a run's state")?
    .ok_or_else(|| StoreError::NotFound {
        path: path.to_path_buf(),
        what: format!("run {run_id}"),
    })
}

/// Append lifecycle transitions to an invocation, after its last one.
fn append_lifecycle(
    tx: &Transaction<'_>,
    path: &Path,
    invocation: InvocationId,
    at: &str,
    steps: &[(&str, &str, &str)],
) -> Result<(), StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO invocation_transitions (invocation_id, seq, at, from_state, event, to_state) \
             VALUES (?1, (SELECT coalesce(max(seq), 0) + 1 FROM invocation_transitions \
                          WHERE invocation_id = ?1), ?2, ?3, ?4, ?5)",
        )
        .ctx(path, "recording an invocation lifecycle")?;
    for (from, event, to) in steps {
        stmt.execute(params![invocation.0, at, from, event, to])
            .ctx(path, "recording an invocation lifecycle")?;
    }
    Ok(())
}

impl Store {
    /// Record that an agent process is starting: the invocation row (status
    /// running, `n` = next in the run) and its first lifecycle transition
    /// (e.g. IDLE -start-> EXECUTING), in one transaction.
    ///
    /// Not fsynced on its own: the step that ends the invocation is, and it
    /// carries this record to disk with it. A power loss before then loses
    /// both, and a resume runs the invocation again — the same as if it had
    /// never started.
    pub fn start_invocation(&mut self, inv: &NewInvocation) -> Result<InvocationId, StoreError> {
        self.relaxed(|store| store.start_invocation_tx(inv))
    }

    fn start_invocation_tx(&mut self, inv: &NewInvocation) -> Result<InvocationId, StoreError> {
        let (tx, path) = self.write_tx()?;
        let (_, status) = run_state(&tx, path, &inv.run_id)?;
        if status.is_terminal() {
            return Err(StoreError::Conflict {
                path: path.to_path_buf(),
                run_id: inv.run_id.clone(),
                detail: format!("the run already {status}"),
            });
        }
        let at = now();
        tx.execute(
            "INSERT INTO invocations (run_id, n, state, agent, attempt, lifecycle_fsm, argv, \
             prompt, context, started_at, status) \
             VALUES (?1, (SELECT coalesce(max(n), 0) + 1 FROM invocations WHERE run_id = ?1), \
                     ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                inv.run_id,
                inv.state,
                inv.agent,
                inv.attempt,
                inv.lifecycle_fsm,
                json(path, &inv.argv)?,
                inv.prompt,
                json(path, &inv.context)?,
                at,
                InvocationStatus::Running,
            ],
        )
        .ctx(path, "recording an invocation start")?;
        let id = InvocationId(tx.last_insert_rowid());
        let (from, event, to) = &inv.lifecycle_start;
        append_lifecycle(
            &tx,
            path,
            id,
            &at,
            &[(from.as_str(), event.as_str(), to.as_str())],
        )?;
        tx.commit().ctx(path, "committing an invocation start")?;
        Ok(id)
    }

    /// Record one workflow step in ONE transaction: finish its invocation
    /// (if any) with its lifecycle, write the transition with the next `seq`,
    /// its messages, and move the run to `to` with `step.run_status`.
    ///
    /// Refused with [`StoreError::Conflict`] when the run is not in
    /// `step.transition.from` (another process advanced it) or is finished.
    pub fn record_step(
        &mut self,
        run_id: &str,
        step: &Step,
    ) -> Result<TransitionRecord, StoreError> {
        let (tx, path) = self.write_tx()?;
        let record = write_step(&tx, path, run_id, step)?;
        tx.commit().ctx(path, "committing a step")?;
        Ok(record)
    }

    /// Close every invocation of the run still marked running (its process
    /// died with the previous modix): status abandoned, no outcome, and the
    /// lifecycle step `abandoned(lifecycle_fsm, last_state)` gives — the
    /// store knows no lifecycle's states; `None` records no step. Returns how
    /// many were closed.
    pub fn abandon_open_invocations(
        &mut self,
        run_id: &str,
        abandoned: impl Fn(&str, &str) -> Option<(String, String, String)>,
    ) -> Result<usize, StoreError> {
        let (tx, path) = self.write_tx()?;
        let open: Vec<(i64, String, String)> = {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT i.id, i.lifecycle_fsm, \
                     coalesce((SELECT to_state FROM invocation_transitions t \
                               WHERE t.invocation_id = i.id ORDER BY seq DESC LIMIT 1), '') \
                     FROM invocations i WHERE i.run_id = ?1 AND i.status = 'running' ORDER BY i.n",
                )
                .ctx(path, "finding open invocations")?;
            stmt.query_map([run_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                .and_then(|rows| rows.collect())
                .ctx(path, "finding open invocations")?
        };
        let at = now();
        for (id, fsm, last) in &open {
            tx.execute(
                "UPDATE invocations SET status = 'abandoned', outcome = NULL, ended_at = ?2 \
                 WHERE id = ?1",
                params![id, at],
            )
            .ctx(path, "abandoning an invocation")?;
            if let Some((from, event, to)) = abandoned(fsm, last) {
                append_lifecycle(
                    &tx,
                    path,
                    InvocationId(*id),
                    &at,
                    &[(from.as_str(), event.as_str(), to.as_str())],
                )?;
            }
        }
        tx.commit().ctx(path, "committing abandoned invocations")?;
        Ok(open.len())
    }
}

/// The body of [`Store::record_step`], without the commit (so a test can
/// drop the transaction half way and check nothing leaked).
pub(super) fn write_step(
    tx: &Transaction<'_>,
    path: &Path,
    run_id: &str,
    step: &Step,
) -> Result<TransitionRecord, StoreError> {
    let t = &step.transition;
    let conflict = |detail: String| StoreError::Conflict {
        path: path.to_path_buf(),
        run_id: run_id.to_owned(),
        detail,
    };
    let (current, status) = run_state(tx, path, run_id)?;
    if status.is_terminal() {
        return Err(conflict(format!(
            "the run already {status} in state {current}"
        )));
    }
    // The resume guard: whoever recorded the last step decides where we are.
    if current != t.from {
        return Err(conflict(format!(
            "expected it in state {:?} but it is in {:?}; another process may be driving it",
            t.from, current
        )));
    }
    let at = now();

    if let Some((id, end)) = &step.invocation {
        finish_invocation(tx, path, run_id, *id, end, &at)?;
    }

    let seq: u32 = tx
        .query_row(
            "SELECT coalesce(max(seq), 0) + 1 FROM transitions WHERE run_id = ?1",
            [run_id],
            |row| row.get(0),
        )
        .ctx(path, "numbering a transition")?;
    tx.execute(
        "INSERT INTO transitions (run_id, seq, at, from_state, event, to_state, attempt, bound, \
         agent, reason, redirected, invocation_id) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![
            run_id,
            seq,
            at,
            t.from,
            t.event,
            t.to,
            t.attempt,
            t.bound,
            t.agent,
            t.reason,
            t.redirected,
            step.invocation.as_ref().map(|(id, _)| id.0),
        ],
    )
    .ctx(path, "recording a transition")?;

    {
        let mut stmt = tx
            .prepare_cached(
                "INSERT INTO messages (run_id, seq, kind, state, payload, at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .ctx(path, "recording a message")?;
        for m in &step.messages {
            stmt.execute(params![
                run_id,
                seq,
                m.kind,
                m.state,
                json(path, &m.payload)?,
                at
            ])
            .ctx(path, "recording a message")?;
        }
    }

    let terminal = step.run_status.is_terminal();
    tx.execute(
        "UPDATE runs SET current_state = ?2, status = ?3, updated_at = ?4, \
         ended_at = CASE WHEN ?5 THEN ?4 END, \
         owner_pid = CASE WHEN ?5 THEN NULL ELSE owner_pid END, \
         heartbeat_at = CASE WHEN ?5 THEN NULL WHEN owner_pid IS NOT NULL THEN ?4 END \
         WHERE id = ?1",
        params![run_id, t.to, step.run_status, at, terminal],
    )
    .ctx(path, "moving a run to its new state")?;

    tx.query_row(
        &format!("SELECT {TRANSITION_COLUMNS} FROM transitions WHERE run_id = ?1 AND seq = ?2"),
        params![run_id, seq],
        transition_from_row,
    )
    .ctx(path, "reading back a transition")
}

/// Closes a running invocation of the run with how it ended, and appends
/// the rest of its lifecycle; part of a step's transaction.
fn finish_invocation(
    tx: &Transaction<'_>,
    path: &Path,
    run_id: &str,
    id: InvocationId,
    end: &InvocationEnd,
    at: &str,
) -> Result<(), StoreError> {
    if end.status == InvocationStatus::Running {
        return Err(StoreError::Invalid {
            path: path.to_path_buf(),
            message: format!("invocation {} cannot end with status running", id.0),
        });
    }
    let validation_errors = json(path, &end.validation_errors)?;
    let parsed_output = end
        .parsed_output
        .as_ref()
        .map(|v| json(path, v))
        .transpose()?;
    let changed = tx
        .execute(
            "UPDATE invocations SET ended_at = ?3, status = ?4, outcome = ?5, exit_code = ?6, \
             signal = ?7, timed_out = ?8, duration_ms = ?9, stdout = ?10, stderr = ?11, \
             stdout_bytes = ?12, stderr_bytes = ?13, parsed_output = ?14, \
             validation_errors = ?15 \
             WHERE id = ?1 AND run_id = ?2 AND status = 'running'",
            params![
                id.0,
                run_id,
                at,
                end.status,
                end.outcome,
                end.exit_code,
                end.signal,
                end.timed_out,
                end.duration_ms.map(to_i64),
                end.stdout,
                end.stderr,
                to_i64(end.stdout_bytes),
                to_i64(end.stderr_bytes),
                parsed_output,
                validation_errors,
            ],
        )
        .ctx(path, "finishing an invocation")?;
    if changed == 0 {
        return Err(StoreError::Conflict {
            path: path.to_path_buf(),
            run_id: run_id.to_owned(),
            detail: format!(
                "invocation {} is not a running invocation of this run",
                id.0
            ),
        });
    }
    let lifecycle: Vec<(&str, &str, &str)> = end
        .lifecycle
        .iter()
        .map(|(f, e, to)| (f.as_str(), e.as_str(), to.as_str()))
        .collect();
    append_lifecycle(tx, path, id, at, &lifecycle)
}
