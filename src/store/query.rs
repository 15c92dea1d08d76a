//! Reading a run back: its transitions, invocations (with their lifecycle)
//! and messages, as plain serializable records for `modix history` and for
//! resume.

use rusqlite::types::Type;
use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;
use serde_json::Value;

use super::record::{InvocationId, InvocationStatus};
use super::{Ctx, Store, StoreError};
use crate::fsm::Outcome;

/// One workflow transition of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransitionRecord {
    pub run_id: String,
    /// 1, 2, 3, … without gaps within a run.
    pub seq: u32,
    pub at: String,
    pub from: String,
    pub event: String,
    pub to: String,
    pub attempt: u32,
    pub bound: Option<u32>,
    pub agent: Option<String>,
    pub reason: Option<String>,
    pub redirected: bool,
    pub invocation_id: Option<InvocationId>,
}

/// One step of an invocation's lifecycle machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LifecycleRecord {
    pub seq: u32,
    pub at: String,
    pub from: String,
    pub event: String,
    pub to: String,
}

/// One agent invocation, in full.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InvocationRecord {
    pub id: InvocationId,
    pub run_id: String,
    /// 1-based order within the run.
    pub n: u32,
    pub state: String,
    pub agent: String,
    pub attempt: u32,
    pub lifecycle_fsm: String,
    pub argv: Vec<String>,
    pub prompt: String,
    pub context: Value,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub status: InvocationStatus,
    pub outcome: Option<Outcome>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: Option<u64>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub parsed_output: Option<Value>,
    pub validation_errors: Vec<String>,
    /// Its lifecycle transitions, by seq.
    pub lifecycle: Vec<LifecycleRecord>,
}

/// A message produced by a step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageRecord {
    pub id: i64,
    pub run_id: String,
    /// Seq of the workflow transition that produced it.
    pub seq: u32,
    pub kind: String,
    pub state: String,
    pub payload: Value,
    pub at: String,
}

pub(super) const TRANSITION_COLUMNS: &str = "run_id, seq, at, from_state, event, to_state, \
     attempt, bound, agent, reason, redirected, invocation_id";

pub(super) fn transition_from_row(row: &Row<'_>) -> rusqlite::Result<TransitionRecord> {
    Ok(TransitionRecord {
        run_id: row.get(0)?,
        seq: row.get(1)?,
        at: row.get(2)?,
        from: row.get(3)?,
        event: row.get(4)?,
        to: row.get(5)?,
        attempt: row.get(6)?,
        bound: row.get(7)?,
        agent: row.get(8)?,
        reason: row.get(9)?,
        redirected: row.get(10)?,
        invocation_id: row.get::<_, Option<i64>>(11)?.map(InvocationId),
    })
}

/// A JSON column, parsed; a parse failure is a conversion error of that column.
fn json_col<T: serde::de::DeserializeOwned>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    serde_json::from_str(&text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e)))
}

fn opt_json_col<T: serde::de::DeserializeOwned>(
    row: &Row<'_>,
    idx: usize,
) -> rusqlite::Result<Option<T>> {
    match row.get::<_, Option<String>>(idx)? {
        None => Ok(None),
        Some(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e))),
    }
}

/// A stored non-negative integer (sizes, durations).
fn u64_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let n: i64 = row.get(idx)?;
    u64::try_from(n).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, n))
}

const INVOCATION_COLUMNS: &str = "id, run_id, n, state, agent, attempt, lifecycle_fsm, argv, \
     prompt, context, started_at, ended_at, status, outcome, exit_code, signal, timed_out, \
     duration_ms, stdout, stderr, stdout_bytes, stderr_bytes, parsed_output, validation_errors";

fn invocation_from_row(row: &Row<'_>) -> rusqlite::Result<InvocationRecord> {
    Ok(InvocationRecord {
        id: InvocationId(row.get(0)?),
        run_id: row.get(1)?,
        n: row.get(2)?,
        state: row.get(3)?,
        agent: row.get(4)?,
        attempt: row.get(5)?,
        lifecycle_fsm: row.get(6)?,
        argv: json_col(row, 7)?,
        prompt: row.get(8)?,
        context: json_col(row, 9)?,
        started_at: row.get(10)?,
        ended_at: row.get(11)?,
        status: row.get(12)?,
        outcome: row.get(13)?,
        exit_code: row.get(14)?,
        signal: row.get(15)?,
        timed_out: row.get(16)?,
        duration_ms: match row.get::<_, Option<i64>>(17)? {
            None => None,
            Some(_) => Some(u64_col(row, 17)?),
        },
        stdout: row.get(18)?,
        stderr: row.get(19)?,
        stdout_bytes: u64_col(row, 20)?,
        stderr_bytes: u64_col(row, 21)?,
        parsed_output: opt_json_col(row, 22)?,
        validation_errors: opt_json_col(row, 23)?.unwrap_or_default(),
        lifecycle: Vec::new(),
    })
}

fn message_from_row(row: &Row<'_>) -> rusqlite::Result<MessageRecord> {
    Ok(MessageRecord {
        id: row.get(0)?,
        run_id: row.get(1)?,
        seq: row.get(2)?,
        kind: row.get(3)?,
        state: row.get(4)?,
        payload: json_col(row, 5)?,
        at: row.get(6)?,
    })
}

const MESSAGE_COLUMNS: &str = "id, run_id, seq, kind, state, payload, at";

impl Store {
    /// The run's workflow transitions, by seq. Empty for an unknown run.
    pub fn transitions(&self, run_id: &str) -> Result<Vec<TransitionRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {TRANSITION_COLUMNS} FROM transitions WHERE run_id = ?1 ORDER BY seq"
            ))
            .ctx(self, "reading transitions")?;
        stmt.query_map([run_id], transition_from_row)
            .and_then(|rows| rows.collect())
            .ctx(self, "reading transitions")
    }

    /// The run's invocations, by n, each with its lifecycle.
    #[cfg(test)]
    pub fn invocations(&self, run_id: &str) -> Result<Vec<InvocationRecord>, StoreError> {
        use std::collections::HashMap;
        let mut invocations: Vec<InvocationRecord> = {
            let mut stmt = self
                .conn
                .prepare_cached(&format!(
                    "SELECT {INVOCATION_COLUMNS} FROM invocations WHERE run_id = ?1 ORDER BY n"
                ))
                .ctx(self, "reading invocations")?;
            stmt.query_map([run_id], invocation_from_row)
                .and_then(|rows| rows.collect())
                .ctx(self, "reading invocations")?
        };
        // One query for all lifecycles rather than one per invocation.
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT it.invocation_id, it.seq, it.at, it.from_state, it.event, it.to_state \
                 FROM invocation_transitions it JOIN invocations i ON i.id = it.invocation_id \
                 WHERE i.run_id = ?1 ORDER BY it.invocation_id, it.seq",
            )
            .ctx(self, "reading invocation lifecycles")?;
        let rows: Vec<(i64, LifecycleRecord)> = stmt
            .query_map([run_id], |row| {
                Ok((row.get(0)?, lifecycle_from_row(row, 1)?))
            })
            .and_then(|rows| rows.collect())
            .ctx(self, "reading invocation lifecycles")?;
        let index: HashMap<i64, usize> = invocations
            .iter()
            .enumerate()
            .map(|(i, inv)| (inv.id.0, i))
            .collect();
        for (id, step) in rows {
            if let Some(&i) = index.get(&id) {
                invocations[i].lifecycle.push(step);
            }
        }
        Ok(invocations)
    }

    /// Invocation number `n` (1-based) of the run, with its lifecycle.
    pub fn invocation(&self, run_id: &str, n: u32) -> Result<InvocationRecord, StoreError> {
        let found = self
            .conn
            .query_row(
                &format!(
                    "SELECT {INVOCATION_COLUMNS} FROM invocations WHERE run_id = ?1 AND n = ?2"
                ),
                params![run_id, n],
                invocation_from_row,
            )
            .optional()
            .ctx(self, "reading an invocation")?;
        let Some(mut inv) = found else {
            return Err(StoreError::UnknownInvocation {
                run_id: run_id.to_owned(),
                n,
            });
        };
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, at, from_state, event, to_state FROM invocation_transitions \
                 WHERE invocation_id = ?1 ORDER BY seq",
            )
            .ctx(self, "reading an invocation lifecycle")?;
        inv.lifecycle = stmt
            .query_map([inv.id.0], |row| lifecycle_from_row(row, 0))
            .and_then(|rows| rows.collect())
            .ctx(self, "reading an invocation lifecycle")?;
        Ok(inv)
    }

    /// The run's messages in the order they were written.
    pub fn messages(&self, run_id: &str) -> Result<Vec<MessageRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages WHERE run_id = ?1 ORDER BY id"
            ))
            .ctx(self, "reading messages")?;
        stmt.query_map([run_id], message_from_row)
            .and_then(|rows| rows.collect())
            .ctx(self, "reading messages")
    }

    /// The most recent message of `kind` in the run, e.g. the last
    /// `task_spec` to hand to a resumed execute state.
    pub fn latest_message(
        &self,
        run_id: &str,
        kind: &str,
    ) -> Result<Option<MessageRecord>, StoreError> {
        self.conn
            .query_row(
                &format!(
                    "SELECT {MESSAGE_COLUMNS} FROM messages WHERE run_id = ?1 AND kind = ?2 \
                     ORDER BY id DESC LIMIT 1"
                ),
                params![run_id, kind],
                message_from_row,
            )
            .optional()
            .ctx(self, "reading the latest message")
    }
}

fn lifecycle_from_row(row: &Row<'_>, first: usize) -> rusqlite::Result<LifecycleRecord> {
    Ok(LifecycleRecord {
        seq: row.get(first)?,
        at: row.get(first + 1)?,
        from: row.get(first + 2)?,
        event: row.get(first + 3)?,
        to: row.get(first + 4)?,
    })
}
