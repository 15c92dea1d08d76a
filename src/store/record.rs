//! Writes that happen while a run executes: recording a workflow step — the
//! invocation that produced it (written whole: what it was given, how its
//! process ran, what it came to), its messages, the transition and the run's
//! new state — in ONE transaction, and recording invocations a stopped or
//! crashed run abandoned.
//!
//! One transaction per step is what makes resume trustworthy: after a crash
//! the database holds either the whole step or none of it. While an agent
//! runs, nothing is written here; what a resume needs to know about it (its
//! process group) is kept beside the run by the orchestrator.

use std::borrow::Cow;
use std::path::Path;

use rusqlite::{OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

use super::blobs::{StoredJson, Text};
use super::context::RunTail;
use super::package::Quotes;
use super::query::{LifecycleRecord, MessageRecord, TransitionRecord, lifecycle_records};
use super::{Ctx, Landing, RunStatus, Store, StoreError, Writer, now, text_enum_sql, to_i64};
use crate::fsm::{FailureClass, Outcome};
use crate::shell::Redactor;

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
    /// Only in databases written by modix before 0.2, whose open rows a
    /// resume closes as abandoned.
    Running,
    Completed,
    Failed,
    /// Its run stopped (Ctrl-C, a crash) while it ran.
    Abandoned,
}

text_enum_sql!(InvocationStatus);

/// The agent's process, as `ps` would name it: its group (the leader's
/// pid) and the leader's start time, which tells it from a reused pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ProcessIds {
    pub pgid: u32,
    /// Clock ticks after boot (`/proc/<pid>/stat` field 22).
    pub started: u64,
}

/// One agent invocation, as it is recorded.
#[derive(Debug, Clone)]
pub struct NewInvocation {
    pub state: String,
    pub agent: String,
    pub attempt: u32,
    /// Name of the agent lifecycle machine (IDLE → EXECUTING → COMPLETED/FAILED).
    pub lifecycle_fsm: String,
    /// Its steps as (from, event, to): the first when the agent started,
    /// the rest when it ended.
    pub lifecycle: Vec<(String, String, String)>,
    /// Command line, program first.
    pub argv: Vec<String>,
    pub prompt: String,
    pub context: Value,
    pub started_at: String,
    pub process: Option<ProcessIds>,
    /// Why the agent could not be started (program or interpreter missing).
    pub error: Option<String>,
    pub status: InvocationStatus,
    pub outcome: Option<Outcome>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: Option<u64>,
    /// As captured (possibly cut; `*_bytes` are the full sizes).
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub parsed_output: Option<Value>,
    pub validation_errors: Vec<String>,
    /// Why it failed (none when it produced valid output) and the CLI's own
    /// one-line reason.
    pub class: Option<FailureClass>,
    pub reason: Option<String>,
    /// What it used (tokens, cost, turns, model, session), as its CLI said.
    pub usage: Option<Value>,
    /// What it did to the workspace: the step's commit and changed paths,
    /// or what was rejected or discarded.
    pub changes: Option<Value>,
    /// It failed and the state's `retry` rule ran it again: which retry
    /// followed, of how many, after what wait.
    pub retry: Option<Value>,
    /// `argv`, `prompt` and `context` as the store keeps them, made while
    /// the agent ran ([`Store::input_texts`]); `None`: made at the commit.
    pub texts: Option<InputTexts>,
}

/// An invocation's command line, prompt and context package as the store
/// keeps them: redacted, serialised (the package split into its stable and
/// its step part, see `package`) and hashed. Made while the agent runs, so
/// the step's commit only writes them.
#[derive(Debug, Clone)]
pub struct InputTexts {
    argv: Text,
    /// `None`: no prompt.
    prompt: Option<Text>,
    context: Text,
    context_now: Option<String>,
}

impl InputTexts {
    fn new(
        redactor: &Redactor,
        path: &Path,
        argv: &[String],
        prompt: &str,
        context: &Value,
        quotes: &Quotes<'_>,
    ) -> Result<InputTexts, StoreError> {
        let json = |v: &Value| super::encode_json(path, &redactor.redact_json(v));
        let argv = Value::from(argv.to_vec());
        let (frame, step) = super::package::split(context);
        let step = step.map(|step| {
            // Compared as stored: the quoted payloads were redacted so.
            let redacted = match redactor.redact_json(&step) {
                Cow::Owned(redacted) => Some(redacted),
                Cow::Borrowed(_) => None,
            };
            let mut step = redacted.unwrap_or(step);
            super::package::refer_feedback(&mut step);
            super::package::refer(&mut step, quotes);
            step
        });
        Ok(InputTexts {
            argv: Text::new(json(&argv)?.into_bytes()),
            prompt: (!prompt.is_empty())
                .then(|| Text::new(redactor.redact_bytes(prompt.as_bytes()).into_owned())),
            context: Text::new(json(&frame)?.into_bytes()),
            context_now: step
                .as_ref()
                .map(|s| super::encode_json(path, s))
                .transpose()?,
        })
    }
}

impl Store {
    /// An invocation's [`InputTexts`], made apart from the commit that
    /// stores them, with this store's redactor. What the package quotes of
    /// the run's messages (`quotes`) is stored by reference (`package`).
    pub fn input_texts(
        &self,
        argv: &[String],
        prompt: &str,
        context: &Value,
        quotes: &Quotes<'_>,
    ) -> Result<InputTexts, StoreError> {
        InputTexts::new(&self.redactor, &self.path, argv, prompt, context, quotes)
    }
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
    /// The invocation that produced the event.
    pub invocation: Option<NewInvocation>,
    pub messages: Vec<NewMessage>,
    /// The run's status after the step (terminal when `to` is final).
    pub run_status: RunStatus,
    /// The run's workspace record as of this step (it moves with every
    /// recorded change), kept with the step so the two never disagree.
    pub workspace: Option<Value>,
    /// Pending messages (`controls` ids) this step's agent was handed: marked
    /// delivered with it, so each reaches exactly one committed step.
    pub delivered: Vec<i64>,
}

impl Writer<'_> {
    /// Current state and status of `run_id`, or NotFound.
    pub(super) fn run_state(&self, run_id: &str) -> Result<(String, RunStatus), StoreError> {
        self.tx
            .prepare_cached("SELECT current_state, status FROM runs WHERE id = ?1")
            .and_then(|mut s| {
                s.query_row([run_id], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()
            })
            .ctx(self.path, "reading a run's state")?
            .ok_or_else(|| StoreError::NotFound {
                path: self.path.to_path_buf(),
                what: format!("run {run_id}"),
            })
    }

    /// Where the run stands for its next step: its state and status, and
    /// the `n` of its last invocation and `seq` of its last transition (0
    /// when none), in one statement.
    fn run_position(&self, run_id: &str) -> Result<RunPosition, StoreError> {
        #[cfg(test)]
        POSITION_READS.with(|n| n.set(n.get() + 1));
        self.tx
            .prepare_cached(
                "SELECT current_state, status, \
                 (SELECT coalesce(max(n), 0) FROM invocations WHERE run_id = ?1), \
                 (SELECT coalesce(max(seq), 0) FROM transitions WHERE run_id = ?1) \
                 FROM runs WHERE id = ?1",
            )
            .and_then(|mut s| {
                s.query_row([run_id], |row| {
                    Ok(RunPosition {
                        state: row.get(0)?,
                        status: row.get(1)?,
                        last_n: row.get(2)?,
                        last_seq: row.get(3)?,
                    })
                })
                .optional()
            })
            .ctx(self.path, "reading a run's state")?
            .ok_or_else(|| StoreError::NotFound {
                path: self.path.to_path_buf(),
                what: format!("run {run_id}"),
            })
    }

    /// Inserts an invocation as the run's `n`; returns its row id, and its
    /// answer as stored (blob id, redacted value) for the message that
    /// carries the same answer.
    fn insert_invocation<'i>(
        &self,
        run_id: &str,
        n: u32,
        inv: &'i NewInvocation,
        ended_at: &str,
    ) -> Result<(i64, Option<StoredJson<'i>>), StoreError> {
        // Its first step is at `started_at`, the others at `ended_at`: only
        // the steps are written (see `query::lifecycle_records`), so the
        // text is the same from one invocation to the next.
        let lifecycle: Vec<[&str; 3]> = inv
            .lifecycle
            .iter()
            .map(|(from, event, to)| [from.as_str(), event.as_str(), to.as_str()])
            .collect();
        let made;
        let texts = match &inv.texts {
            Some(texts) => texts,
            None => {
                made = InputTexts::new(
                    self.redactor,
                    self.path,
                    &inv.argv,
                    &inv.prompt,
                    &inv.context,
                    &Quotes::default(),
                )?;
                &made
            }
        };
        let validation_errors = match inv.validation_errors.is_empty() {
            true => None,
            false => Some(self.json(&inv.validation_errors)?),
        };
        let (stdout, parsed) = self.stored_output(&inv.stdout, inv.parsed_output.as_ref())?;
        let usage = inv.usage.as_ref().map(|u| self.json_value(u)).transpose()?;
        if let Some(usage) = &usage {
            self.add_usage(run_id, usage)?;
        }
        let stmt = "INSERT INTO invocations (run_id, n, state, agent, attempt, lifecycle_fsm, \
             lifecycle, argv, prompt, context, started_at, ended_at, status, outcome, error, \
             pgid, process_started, exit_code, signal, timed_out, duration_ms, stdout, stderr, \
             stdout_bytes, stderr_bytes, parsed_output, validation_errors, class, reason, usage, \
             changes_ref, retry, context_now, lifecycle_ref, argv_ref) \
             VALUES (?1, ?33, \
             ?2, ?3, ?4, ?5, 'null', 'null', ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, \
             ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?6, ?7)";
        self.tx
            .prepare_cached(stmt)
            .and_then(|mut s| {
                s.execute(params![
                    run_id,
                    inv.state,
                    inv.agent,
                    inv.attempt,
                    inv.lifecycle_fsm,
                    self.put(
                        serde_json::to_string(&lifecycle)
                            .unwrap_or_else(|_| "[]".into())
                            .as_bytes()
                    )
                    .map_err(to_sql)?,
                    self.put_text(&texts.argv).map_err(to_sql)?,
                    texts
                        .prompt
                        .as_ref()
                        .map(|p| self.put_text(p))
                        .transpose()
                        .map_err(to_sql)?,
                    self.put_text(&texts.context).map_err(to_sql)?,
                    inv.started_at,
                    ended_at,
                    inv.status,
                    inv.outcome,
                    inv.error.as_deref().map(|e| self.text(e)),
                    inv.process.map(|p| p.pgid),
                    inv.process.map(|p| to_i64(p.started)),
                    inv.exit_code,
                    inv.signal,
                    inv.timed_out,
                    inv.duration_ms.map(to_i64),
                    stdout,
                    self.blob(&inv.stderr).map_err(to_sql)?,
                    to_i64(inv.stdout_bytes),
                    to_i64(inv.stderr_bytes),
                    parsed.as_ref().map(|p| p.id),
                    validation_errors,
                    inv.class.map(FailureClass::as_str),
                    inv.reason.as_deref().map(|r| self.text(r)),
                    usage,
                    match &inv.changes {
                        Some(c) => self.blob_json(c).map_err(to_sql)?,
                        None => None,
                    },
                    inv.retry
                        .as_ref()
                        .map(|r| self.json_value(r))
                        .transpose()
                        .map_err(to_sql)?,
                    texts.context_now,
                    n,
                ])
            })
            .ctx(self.path, "recording an invocation")?;
        Ok((self.tx.last_insert_rowid(), parsed))
    }
}

/// A store error raised inside a statement's parameters, carried out as a
/// rusqlite error (and back, by `ctx`, with its message).
fn to_sql(e: StoreError) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(e))
}

impl Store {
    /// Record one workflow step in ONE transaction: its invocation (if any),
    /// the transition with the next `seq`, its messages, and the run moved
    /// to `to` with `step.run_status`.
    ///
    /// Refused with [`StoreError::Conflict`] when the run is not in
    /// `step.transition.from` (another process advanced it) or is finished.
    ///
    /// A run's driver records through [`Store::record_step_tailed`], which
    /// keeps its tail current; this form is for tests of the record alone.
    #[cfg(test)]
    pub fn record_step(
        &mut self,
        run_id: &str,
        step: &Step,
    ) -> Result<TransitionRecord, StoreError> {
        let w = self.write_tx()?;
        let (record, ..) = write_step(&w, run_id, step, false, None)?;
        w.commit("committing a step")?;
        Ok(record)
    }

    /// Records one step as `record_step` does, for the run whose `tail` the
    /// caller keeps current: when nothing of the run was written since the tail was last
    /// read (asked in the step's own transaction), the step's messages join
    /// the tail as stored — ids, redacted payloads — instead of being read
    /// back and parsed again before the next step. Otherwise the tail's next
    /// refresh reads them with whatever else was written.
    ///
    /// The step is committed and on its way to the disk: it is durable once
    /// the returned [`Landing`] is waited for, which the caller does before
    /// anything depends on the step (see `durable`).
    pub fn record_step_tailed(
        &mut self,
        tail: &mut RunTail,
        step: &Step,
    ) -> Result<(TransitionRecord, Landing), StoreError> {
        let last = self.last_step.take();
        let w = self.write_tx()?;
        // Nothing written since this store's last step of the run (by any
        // connection): the run is where that step left it and the tail holds
        // all its messages, with no statement to ask either.
        let known = match last {
            Some(last) if last.run_id == tail.run_id && last.watermark == tail.watermark => {
                (last.stamp == stamp(&w)?).then_some(last.position)
            }
            _ => None,
        };
        let current = known.is_some() || !w.written_since(&tail.run_id, tail.watermark)?;
        let (record, messages, position) = write_step(&w, &tail.run_id, step, current, known)?;
        // Read before the commit, while no one else can write: this
        // connection's own commit leaves the data version as it is.
        let after = stamp(&w)?;
        let landing = w.commit_landing("committing a step")?;
        if current {
            tail.took_own(messages);
            self.last_step = Some(LastStep {
                run_id: tail.run_id.clone(),
                watermark: tail.watermark,
                stamp: after,
                position,
            });
        }
        Ok((record, landing))
    }

    /// Record an invocation that is not tied to a transition: one the run
    /// abandoned (Ctrl-C, or a crash found by a resume), or one that failed
    /// and is run again under its state's `retry` rule.
    pub fn record_abandoned(
        &mut self,
        run_id: &str,
        inv: &NewInvocation,
    ) -> Result<(), StoreError> {
        let w = self.write_tx()?;
        let at = w.run_position(run_id)?;
        w.insert_invocation(run_id, at.last_n + 1, inv, &now())?;
        w.commit("committing an abandoned invocation")
    }

    /// Records what invocation `n` did to the workspace, found out after it
    /// was recorded (what an abandoned agent left, discarded on resume).
    pub fn set_invocation_changes(
        &mut self,
        run_id: &str,
        n: u32,
        changes: &Value,
    ) -> Result<(), StoreError> {
        let w = self.write_tx()?;
        let json = w.json_value(changes)?;
        w.tx.execute(
            "UPDATE invocations SET changes = ?3, changes_ref = NULL WHERE run_id = ?1 AND n = ?2",
            params![run_id, n, json],
        )
        .ctx(w.path, "recording an invocation's changes")?;
        w.commit("committing an invocation's changes")
    }

    /// Whether the run already has a transition with this `seq` (so an
    /// invocation meant for that step was recorded with it).
    pub fn has_transition(&self, run_id: &str, seq: u32) -> Result<bool, StoreError> {
        self.conn
            .query_row(
                "SELECT 1 FROM transitions WHERE run_id = ?1 AND seq = ?2",
                params![run_id, seq],
                |_| Ok(()),
            )
            .optional()
            .map(|found| found.is_some())
            .ctx(self, "looking up a transition")
    }

    /// Close the invocations of the run that a modix before 0.2 left marked
    /// running: status abandoned, no outcome, and the lifecycle step
    /// `abandoned(lifecycle_fsm, last_state)` gives (the store knows no
    /// lifecycle's states; `None` records no step). Returns how many.
    pub fn abandon_open_invocations(
        &mut self,
        run_id: &str,
        abandoned: impl Fn(&str, &str) -> Option<(String, String, String)>,
    ) -> Result<usize, StoreError> {
        let w = self.write_tx()?;
        type Open = (i64, String, String, String, Option<String>);
        let open: Vec<Open> =
            w.tx.prepare_cached(
                "SELECT i.id, i.lifecycle_fsm, coalesce(b.text, i.lifecycle), i.started_at, \
                 i.ended_at FROM invocations i LEFT JOIN blobs b ON b.id = i.lifecycle_ref \
                 WHERE i.run_id = ?1 AND i.status = 'running' ORDER BY i.n",
            )
            .and_then(|mut s| {
                s.query_map([run_id], |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                    ))
                })?
                .collect()
            })
            .ctx(w.path, "finding open invocations")?;
        let at = now();
        for (id, fsm, lifecycle, started_at, ended_at) in &open {
            let mut steps =
                lifecycle_records(lifecycle, started_at, ended_at.as_deref()).unwrap_or_default();
            let last = steps.last().map(|s| s.to.clone()).unwrap_or_default();
            if let Some((from, event, to)) = abandoned(fsm, &last) {
                let seq = steps.len() as u32 + 1;
                let at = at.clone();
                steps.push(LifecycleRecord {
                    seq,
                    at,
                    from,
                    event,
                    to,
                });
            }
            // Written whole, with its times: its last step's is not `ended_at`'s.
            let text = serde_json::to_string(&steps).unwrap_or_else(|_| "[]".into());
            w.tx.execute(
                "UPDATE invocations SET status = 'abandoned', outcome = NULL, ended_at = ?2, \
                 lifecycle = ?3, lifecycle_ref = NULL WHERE id = ?1",
                params![id, at, text],
            )
            .ctx(w.path, "abandoning an invocation")?;
        }
        w.commit("committing abandoned invocations")?;
        Ok(open.len())
    }
}

/// The body of [`Store::record_step_tailed`], without the commit (so a test
/// can drop the transaction half way and check nothing leaked).
///
/// With `keep`, it also returns the step's messages as a reader would find
/// them; with `known`, the run's position is taken as it is instead of read
/// (the caller knows nothing was written since it was). Last, where the run
/// is after the step.
pub(super) fn write_step(
    w: &Writer<'_>,
    run_id: &str,
    step: &Step,
    keep: bool,
    known: Option<RunPosition>,
) -> Result<(TransitionRecord, Vec<MessageRecord>, RunPosition), StoreError> {
    let t = &step.transition;
    let conflict = |detail: String| StoreError::Conflict {
        path: w.path.to_path_buf(),
        run_id: run_id.to_owned(),
        detail,
    };
    let RunPosition {
        state: current,
        status,
        last_n,
        last_seq,
    } = match known {
        Some(position) => position,
        None => w.run_position(run_id)?,
    };
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
    let n = last_n + 1;
    let (invocation, answer) = match &step.invocation {
        Some(inv) => {
            let (id, answer) = w.insert_invocation(run_id, n, inv, &at)?;
            (Some(id), inv.parsed_output.as_ref().zip(answer))
        }
        None => (None, None),
    };
    let reason = t.reason.as_deref().map(|r| w.text(r));
    let seq = last_seq + 1;
    w.tx.prepare_cached(
        "INSERT INTO transitions (run_id, seq, at, from_state, event, to_state, attempt, bound, \
         agent, reason, redirected, invocation_id) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )
    .and_then(|mut s| {
        s.execute(params![
            run_id,
            seq,
            at,
            t.from,
            t.event,
            t.to,
            t.attempt,
            t.bound,
            t.agent,
            reason,
            t.redirected,
            invocation,
        ])
    })
    .ctx(w.path, "recording a transition")?;
    let mut kept = Vec::new();
    for m in &step.messages {
        // The state's output message carries the invocation's answer:
        // redacted, encoded and hashed once for both.
        let StoredJson {
            id: payload,
            value: stored,
        } = match &answer {
            Some((parsed, a)) if *parsed == &m.payload => StoredJson {
                id: a.id,
                value: a.value.clone(),
            },
            _ => w.stored_json(&m.payload)?,
        };
        w.tx.prepare_cached(
            "INSERT INTO messages (run_id, seq, kind, state, payload, at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .and_then(|mut s| s.execute(params![run_id, seq, m.kind, m.state, payload, at]))
        .ctx(w.path, "recording a message")?;
        if keep {
            kept.push(MessageRecord {
                id: w.tx.last_insert_rowid(),
                run_id: run_id.to_owned(),
                seq,
                kind: m.kind.clone(),
                state: m.state.clone(),
                payload: stored.into_owned(),
                at: at.clone(),
                payload_blob: payload,
            });
        }
    }
    move_run(w, run_id, &t.to, step.run_status, &at)?;
    for id in &step.delivered {
        w.tx.prepare_cached(
            "UPDATE controls SET taken_at = ?3, taken_seq = ?2 WHERE id = ?1 AND taken_at IS NULL",
        )
        .and_then(|mut s| s.execute(params![id, seq, at]))
        .ctx(w.path, "marking pending messages delivered")?;
    }
    if let Some(ws) = &step.workspace {
        // As in `create_run`: modix's own paths and ids, stored as they are.
        w.tx.prepare_cached("UPDATE runs SET workspace = ?2 WHERE id = ?1")
            .and_then(|mut s| s.execute(params![run_id, ws.to_string()]))
            .ctx(w.path, "recording the run's workspace")?;
    }
    // The transition as stored (its reason redacted), without reading it back.
    let record = TransitionRecord {
        run_id: run_id.to_owned(),
        seq,
        at,
        from: t.from.clone(),
        event: t.event.clone(),
        to: t.to.clone(),
        attempt: t.attempt,
        bound: t.bound,
        agent: t.agent.clone(),
        reason: reason.map(std::borrow::Cow::into_owned),
        redirected: t.redirected,
        invocation: invocation.map(|_| n),
    };
    let position = RunPosition {
        state: t.to.clone(),
        status: step.run_status,
        last_n: if invocation.is_some() { n } else { last_n },
        last_seq: seq,
    };
    Ok((record, kept, position))
}

/// What [`Writer::run_position`] reads.
#[derive(Debug)]
pub(super) struct RunPosition {
    state: String,
    status: RunStatus,
    last_n: u32,
    last_seq: u32,
}

/// The run's new state and status; a final status ends it and drops its owner.
fn move_run(
    w: &Writer<'_>,
    run_id: &str,
    to: &str,
    status: RunStatus,
    at: &str,
) -> Result<(), StoreError> {
    let terminal = status.is_terminal();
    w.tx.prepare_cached(
        "UPDATE runs SET current_state = ?2, status = ?3, updated_at = ?4, \
         ended_at = CASE WHEN ?5 THEN ?4 END, \
         owner_pid = CASE WHEN ?5 THEN NULL ELSE owner_pid END, \
         owner_started = CASE WHEN ?5 THEN NULL ELSE owner_started END, \
         heartbeat_at = CASE WHEN ?5 THEN NULL WHEN owner_pid IS NOT NULL THEN ?4 END \
         WHERE id = ?1",
    )
    .and_then(|mut s| s.execute(params![run_id, to, status, at, terminal]))
    .ctx(w.path, "moving a run to its new state")?;
    Ok(())
}

#[cfg(test)]
thread_local! {
    /// How many times this thread read a run's position from the database.
    pub(super) static POSITION_READS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A store's last step of a run, kept so that its next step need not read
/// back what this one wrote ([`Store::record_step_tailed`]).
#[derive(Debug)]
pub(super) struct LastStep {
    run_id: String,
    /// The run's tail after the step, which then held every message of it.
    watermark: i64,
    stamp: Stamp,
    /// Where the step left the run.
    position: RunPosition,
}

/// What changes when anything is written to the database: SQLite's data
/// version (moved by every commit of another connection, in this process
/// or another) and this connection's count of rows changed (moved by its
/// own writes, committed or not). Equal stamps: nothing was written in
/// between. Read in a transaction, so it is the state that transaction sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    data_version: i64,
    own_changes: u64,
}

fn stamp(w: &Writer<'_>) -> Result<Stamp, StoreError> {
    Ok(Stamp {
        data_version: w
            .tx
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .ctx(w.path, "reading the data version")?,
        own_changes: w.tx.total_changes(),
    })
}
