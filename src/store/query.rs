//! Reading a run back: its transitions, invocations (with their lifecycle)
//! and messages, as plain serializable records for `modix history` and for
//! resume. Texts come back from `blobs`.

use rusqlite::types::Type;
use rusqlite::{OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::record::InvocationStatus;
use super::{Ctx, Store, StoreError, blobs};
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
    /// The run's invocation that produced it (the `N` of `--invocation N`).
    pub invocation: Option<u32>,
}

/// The spans (ms since the epoch) in which a run stood stopped while an
/// agent of it was at work, from [`Store::stops`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stops(Vec<(i64, i64)>);

impl Stops {
    /// How long (ms) the run stood stopped between the times `a` and `b`.
    pub fn within(&self, a: &str, b: &str) -> u64 {
        let ms = |t: &str| {
            t.parse::<jiff::Timestamp>()
                .ok()
                .map(|t| t.as_millisecond())
        };
        let (Some(a), Some(b)) = (ms(a), ms(b)) else {
            return 0;
        };
        self.0
            .iter()
            .map(|&(from, to)| u64::try_from(to.min(b) - from.max(a)).unwrap_or(0))
            .sum()
    }
}

/// One step of an invocation's lifecycle machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Why the agent could not be started, when it could not.
    pub error: Option<String>,
    /// The agent's process group, when it started.
    pub pgid: Option<u32>,
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
    /// Why it failed, and the CLI's own reason.
    pub class: Option<String>,
    pub reason: Option<String>,
    pub usage: Option<Value>,
    /// What it did to the workspace (the record, not the agent's claim).
    pub changes: Option<Value>,
    /// It was run again under its state's `retry` rule: which retry, of how
    /// many, after what wait.
    pub retry: Option<Value>,
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
    /// The blob the payload is stored in (a context package that quotes
    /// the message refers to it, see `package`).
    #[serde(skip)]
    pub payload_blob: i64,
}

/// The columns [`transition_from_row`] reads, with the tables they come from.
pub(super) const TRANSITION_COLUMNS: &str = "t.run_id, t.seq, t.at, t.from_state, t.event, \
     t.to_state, t.attempt, t.bound, t.agent, t.reason, t.redirected, i.n \
     FROM transitions t LEFT JOIN invocations i ON i.id = t.invocation_id";

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
        invocation: row.get(11)?,
    })
}

/// An invocation's lifecycle steps from its stored text: each step either
/// as written since schema 6 — `[from, event, to]`, the first at the
/// invocation's `started_at`, the others at its `ended_at` — or whole, with
/// its own `seq` and `at` (older rows, abandoned invocations).
pub(super) fn lifecycle_records(
    text: &str,
    started_at: &str,
    ended_at: Option<&str>,
) -> Result<Vec<LifecycleRecord>, serde_json::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Step(String, String, String),
        Whole(LifecycleRecord),
    }
    let stored: Vec<Stored> = serde_json::from_str(text)?;
    Ok(stored
        .into_iter()
        .enumerate()
        .map(|(i, s)| match s {
            Stored::Whole(r) => r,
            Stored::Step(from, event, to) => LifecycleRecord {
                seq: i as u32 + 1,
                at: match (i, ended_at) {
                    (0, _) | (_, None) => started_at.to_owned(),
                    (_, Some(end)) => end.to_owned(),
                },
                from,
                event,
                to,
            },
        })
        .collect())
}

/// A JSON text column, parsed; a parse failure is a conversion error of that column.
fn json_col<T: serde::de::DeserializeOwned>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    serde_json::from_str(&text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e)))
}

/// A stored non-negative integer (sizes, durations).
fn u64_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let n: i64 = row.get(idx)?;
    u64::try_from(n).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, n))
}

/// The `SELECT … FROM invocations i …` that [`invocation_from_row`] reads.
fn invocation_query(filter: &str) -> String {
    let joins: Vec<(String, String)> = [
        ("bp", "i.prompt"),
        ("bc", "i.context"),
        ("bo", "i.stdout"),
        ("be", "i.stderr"),
        ("bj", "i.parsed_output"),
        ("bs", "i.context_step"),
    ]
    .iter()
    .map(|(alias, col)| blobs::join(alias, col))
    .collect();
    let mut cols: Vec<&str> = joins.iter().map(|(_, c)| c.as_str()).collect();
    // The part of the package that changes at each visit: in the row since
    // store v9, in a blob before.
    cols[5] = "coalesce(i.context_now, bs.text), bs.bytes";
    let from: String = joins.iter().map(|(j, _)| j.as_str()).collect();
    format!(
        "SELECT i.run_id, i.n, i.state, i.agent, i.attempt, i.lifecycle_fsm, \
         coalesce(ba.text, i.argv), \
         i.started_at, i.ended_at, i.status, i.outcome, i.error, i.pgid, i.exit_code, i.signal, \
         i.timed_out, i.duration_ms, i.stdout_bytes, i.stderr_bytes, i.validation_errors, \
         coalesce(bl.text, i.lifecycle), i.class, i.reason, i.usage, \
         coalesce(i.changes, bch.text), i.retry, {} \
         FROM invocations i{from} LEFT JOIN blobs bch ON bch.id = i.changes_ref \
         LEFT JOIN blobs ba ON ba.id = i.argv_ref LEFT JOIN blobs bl ON bl.id = i.lifecycle_ref \
         WHERE {filter}",
        cols.join(", ")
    )
}

/// An invocation's row as a record; `quoted` reads the payload of a
/// message its context package quotes, by the payload's blob.
fn invocation_from_row(
    row: &Row<'_>,
    quoted: impl FnMut(i64) -> rusqlite::Result<Value>,
) -> rusqlite::Result<InvocationRecord> {
    // The blob pairs start after the 26 plain columns.
    let blob = |k: usize| 26 + 2 * k;
    let opt_json = |i: usize| -> rusqlite::Result<Option<Value>> {
        match row.get::<_, Option<String>>(i)? {
            None => Ok(None),
            Some(_) => json_col(row, i).map(Some),
        }
    };
    Ok(InvocationRecord {
        run_id: row.get(0)?,
        n: row.get(1)?,
        state: row.get(2)?,
        agent: row.get(3)?,
        attempt: row.get(4)?,
        lifecycle_fsm: row.get(5)?,
        argv: json_col(row, 6)?,
        started_at: row.get(7)?,
        ended_at: row.get(8)?,
        status: row.get(9)?,
        outcome: row.get(10)?,
        error: row.get(11)?,
        pgid: row.get(12)?,
        exit_code: row.get(13)?,
        signal: row.get(14)?,
        timed_out: row.get(15)?,
        duration_ms: match row.get::<_, Option<i64>>(16)? {
            None => None,
            Some(_) => Some(u64_col(row, 16)?),
        },
        stdout_bytes: u64_col(row, 17)?,
        stderr_bytes: u64_col(row, 18)?,
        validation_errors: match row.get::<_, Option<String>>(19)? {
            None => Vec::new(),
            Some(_) => json_col(row, 19)?,
        },
        lifecycle: {
            let text: String = row.get(20)?;
            let ended: Option<String> = row.get(8)?;
            lifecycle_records(&text, &row.get::<_, String>(7)?, ended.as_deref()).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(20, Type::Text, Box::new(e))
            })?
        },
        class: row.get(21)?,
        reason: row.get(22)?,
        usage: opt_json(23)?,
        changes: opt_json(24)?,
        retry: opt_json(25)?,
        prompt: blobs::read(row, blob(0))?,
        context: {
            let mut step: Option<Value> = blobs::read_json(row, blob(5))?;
            if let Some(step) = &mut step {
                super::package::put_back(step, quoted)?;
            }
            super::package::join(blobs::read_json(row, blob(1))?.unwrap_or(Value::Null), step)
        },
        stdout: blobs::read(row, blob(2))?,
        stderr: blobs::read(row, blob(3))?,
        parsed_output: blobs::read_json(row, blob(4))?,
    })
}

/// A blob a context package quotes that the store does not hold.
#[derive(Debug, thiserror::Error)]
#[error("blob {0} is not in the store")]
struct MissingBlob(i64);

impl MissingBlob {
    fn of(e: &rusqlite::Error) -> Option<&MissingBlob> {
        match e {
            rusqlite::Error::FromSqlConversionFailure(_, _, e) => e.downcast_ref(),
            _ => None,
        }
    }
}

pub(super) const MESSAGE_QUERY: &str = "SELECT m.id, m.run_id, m.seq, m.kind, m.state, b.text, b.bytes, \
     m.at, m.payload FROM messages m JOIN blobs b ON b.id = m.payload";

/// A message's payload from its blob's columns at `idx`: a context
/// package's quote of it is put back the same way (`package::put_back`).
fn message_payload(row: &Row<'_>, idx: usize) -> rusqlite::Result<Value> {
    Ok(blobs::read_json(row, idx)?.unwrap_or(Value::Null))
}

pub(super) fn message_from_row(row: &Row<'_>) -> rusqlite::Result<MessageRecord> {
    Ok(MessageRecord {
        id: row.get(0)?,
        run_id: row.get(1)?,
        seq: row.get(2)?,
        kind: row.get(3)?,
        state: row.get(4)?,
        payload: message_payload(row, 5)?,
        at: row.get(7)?,
        payload_blob: row.get(8)?,
    })
}

impl Store {
    /// The run's workflow transitions, by seq. Empty for an unknown run.
    pub fn transitions(&self, run_id: &str) -> Result<Vec<TransitionRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {TRANSITION_COLUMNS} WHERE t.run_id = ?1 ORDER BY t.seq"
            ))
            .ctx(self, "reading transitions")?;
        stmt.query_map([run_id], transition_from_row)
            .and_then(|rows| rows.collect())
            .ctx(self, "reading transitions")
    }

    /// Hands the run's transitions after `after` (0: all) to `f` one at a
    /// time, by seq, as they are read (a run of a million steps is never in
    /// memory whole). Stops at `f`'s first error, which it returns inside
    /// the store's result.
    pub fn each_transition<E>(
        &self,
        run_id: &str,
        after: u32,
        f: impl FnMut(TransitionRecord) -> Result<(), E>,
    ) -> Result<Result<(), E>, StoreError> {
        let sql = format!(
            "SELECT {TRANSITION_COLUMNS} WHERE t.run_id = ?1 AND t.seq > ?2 ORDER BY t.seq"
        );
        self.each_row(&sql, params![run_id, after], transition_from_row, f)
            .ctx(self, "reading transitions")
    }

    /// [`Store::each_transition`] for the run's messages of the steps after
    /// `after` (0: all), by id.
    pub fn each_message<E>(
        &self,
        run_id: &str,
        after: u32,
        mut f: impl FnMut(MessageRecord) -> Result<(), E>,
    ) -> Result<Result<(), E>, StoreError> {
        if after == 0 {
            let sql = format!("{MESSAGE_QUERY} WHERE m.run_id = ?1 ORDER BY m.id");
            return self
                .each_row(&sql, [run_id], message_from_row, f)
                .ctx(self, "reading messages");
        }
        let sql = format!("{MESSAGE_QUERY} WHERE m.id = ?1");
        for id in self.message_ids_after(run_id, after)? {
            let each = self.each_row(&sql, [id], message_from_row, &mut f);
            match each.ctx(self, "reading messages")? {
                Ok(()) => {}
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(()))
    }

    /// The ids of the run's messages of the steps after `after`, in order,
    /// from its last ones back, kind by kind: the only index on messages
    /// is `(run_id, kind, id)` (a step's transaction writes no other), and
    /// a run's message ids grow with their step (a step's messages are
    /// written by the step, a fork's copies in order before its own), so
    /// each kind's read stops at its first message of an earlier step.
    /// The last steps of a run of a million are found in a few seeks.
    fn message_ids_after(&self, run_id: &str, after: u32) -> Result<Vec<i64>, StoreError> {
        let mut next_kind = self
            .conn
            .prepare_cached(
                "SELECT kind FROM messages WHERE run_id = ?1 AND kind > ?2 ORDER BY kind LIMIT 1",
            )
            .ctx(self, "reading messages")?;
        let mut of_kind = self
            .conn
            .prepare_cached(
                "SELECT id, seq FROM messages INDEXED BY messages_by_run_kind \
                 WHERE run_id = ?1 AND kind = ?2 ORDER BY id DESC",
            )
            .ctx(self, "reading messages")?;
        let mut ids = Vec::new();
        let mut kind = String::new();
        while let Some(k) = next_kind
            .query_row(params![run_id, kind], |r| r.get::<_, String>(0))
            .optional()
            .ctx(self, "reading messages")?
        {
            let mut rows = of_kind
                .query(params![run_id, k])
                .ctx(self, "reading messages")?;
            while let Some(row) = rows.next().ctx(self, "reading messages")? {
                let (id, seq): (i64, u32) = (
                    row.get(0).ctx(self, "reading messages")?,
                    row.get(1).ctx(self, "reading messages")?,
                );
                if seq <= after {
                    break;
                }
                ids.push(id);
            }
            kind = k;
        }
        ids.sort_unstable();
        Ok(ids)
    }

    fn each_row<T, E>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        read: impl Fn(&Row<'_>) -> rusqlite::Result<T>,
        mut f: impl FnMut(T) -> Result<(), E>,
    ) -> rusqlite::Result<Result<(), E>> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let mut rows = stmt.query(params)?;
        while let Some(row) = rows.next()? {
            if let Err(e) = f(read(row)?) {
                return Ok(Err(e));
            }
        }
        Ok(Ok(()))
    }

    /// How many transitions the run has: its last `seq` (they run 1, 2, 3,
    /// … without gaps), one seek in the primary key.
    pub fn transition_count(&self, run_id: &str) -> Result<u32, StoreError> {
        self.conn
            .prepare_cached("SELECT coalesce(max(seq), 0) FROM transitions WHERE run_id = ?1")
            .and_then(|mut s| s.query_row([run_id], |row| row.get(0)))
            .ctx(self, "counting transitions")
    }

    /// The run's transitions after `seq`, by seq.
    pub fn transitions_after(
        &self,
        run_id: &str,
        seq: u32,
    ) -> Result<Vec<TransitionRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {TRANSITION_COLUMNS} WHERE t.run_id = ?1 AND t.seq > ?2 ORDER BY t.seq"
            ))
            .ctx(self, "reading transitions")?;
        stmt.query_map(params![run_id, seq], transition_from_row)
            .and_then(|rows| rows.collect())
            .ctx(self, "reading transitions")
    }

    /// The run's invocations, by n, each with its lifecycle.
    #[cfg(test)]
    pub fn invocations(&self, run_id: &str) -> Result<Vec<InvocationRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&invocation_query("i.run_id = ?1 ORDER BY i.n"))
            .ctx(self, "reading invocations")?;
        stmt.query_map([run_id], |row| {
            invocation_from_row(row, |id| self.quoted(id))
        })
        .and_then(|rows| rows.collect())
        .ctx(self, "reading invocations")
    }

    /// Invocation number `n` (1-based) of the run, with its lifecycle.
    pub fn invocation(&self, run_id: &str, n: u32) -> Result<InvocationRecord, StoreError> {
        let read = self
            .conn
            .query_row(
                &invocation_query("i.run_id = ?1 AND i.n = ?2"),
                params![run_id, n],
                |row| invocation_from_row(row, |id| self.quoted(id)),
            )
            .optional();
        if let Some(MissingBlob(blob)) = read.as_ref().err().and_then(MissingBlob::of) {
            return Err(StoreError::Invalid {
                path: self.path.clone(),
                message: format!(
                    "invocation {n} of run {run_id}: its context package quotes blob {blob}, \
                     which is not in the store (the file was changed outside modix; \
                     `sqlite3 FILE 'PRAGMA foreign_key_check'` lists what else is missing)"
                ),
            });
        }
        read.ctx(self, "reading an invocation")?
            .ok_or_else(|| StoreError::UnknownInvocation {
                run_id: run_id.to_owned(),
                n,
            })
    }

    /// The payload of a message a context package quotes, from its blob;
    /// [`MissingBlob`] when the store lacks it (not "no row", which the
    /// invocation's own query would take for a missing invocation).
    fn quoted(&self, blob: i64) -> rusqlite::Result<Value> {
        self.conn
            .prepare_cached("SELECT text, bytes FROM blobs WHERE id = ?1")?
            .query_row([blob], |row| message_payload(row, 0))
            .optional()?
            .ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    0,
                    Type::Integer,
                    Box::new(MissingBlob(blob)),
                )
            })
    }

    /// The run's messages in the order they were written.
    pub fn messages(&self, run_id: &str) -> Result<Vec<MessageRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "{MESSAGE_QUERY} WHERE m.run_id = ?1 ORDER BY m.id"
            ))
            .ctx(self, "reading messages")?;
        stmt.query_map([run_id], message_from_row)
            .and_then(|rows| rows.collect())
            .ctx(self, "reading messages")
    }

    /// What each invocation of the run did to the workspace, by n (those
    /// with a record only).
    /// (invocation number, changes), by number.
    pub fn invocation_changes(&self, run_id: &str) -> Result<Vec<(u32, Value)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT i.n, coalesce(i.changes, b.text) FROM invocations i \
                 LEFT JOIN blobs b ON b.id = i.changes_ref WHERE i.run_id = ?1 \
                 AND (i.changes IS NOT NULL OR i.changes_ref IS NOT NULL) ORDER BY i.n",
            )
            .ctx(self, "reading invocations' changes")?;
        stmt.query_map([run_id], |row| Ok((row.get(0)?, json_col(row, 1)?)))
            .and_then(|rows| rows.collect())
            .ctx(self, "reading invocations' changes")
    }

    /// When the run stood stopped while one of its agents was at work: from
    /// the moment that agent's invocation was abandoned (Ctrl-C, `modix
    /// stop --now`: recorded then) to the start of the next invocation (a
    /// resume's). Only invocations numbered above `after` (a long run's
    /// shown window), through the (run, n) key. A stop modix did not see
    /// (a killed process: its invocation is recorded as abandoned by the
    /// resume) spans no time here.
    pub fn stops(&self, run_id: &str, after: u32) -> Result<Stops, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT a.ended_at, (SELECT b.started_at FROM invocations b \
                 WHERE b.run_id = a.run_id AND b.n > a.n ORDER BY b.n LIMIT 1) \
                 FROM invocations a WHERE a.run_id = ?1 AND a.n > ?2 \
                 AND a.status = 'abandoned' AND a.ended_at IS NOT NULL ORDER BY a.n",
            )
            .ctx(self, "reading the run's stops")?;
        let spans: Vec<(String, Option<String>)> = stmt
            .query_map(params![run_id, after], |row| Ok((row.get(0)?, row.get(1)?)))
            .and_then(|rows| rows.collect())
            .ctx(self, "reading the run's stops")?;
        let ms = |t: &str| {
            t.parse::<jiff::Timestamp>()
                .ok()
                .map(|t| t.as_millisecond())
        };
        Ok(Stops(
            spans
                .iter()
                .filter_map(|(from, to)| Some((ms(from)?, ms(to.as_deref()?)?)))
                .filter(|(from, to)| from < to)
                .collect(),
        ))
    }

    /// The number of the run's last invocation when it was abandoned (the
    /// run stopped while that agent worked), else `None`.
    pub fn last_invocation_if_abandoned(&self, run_id: &str) -> Result<Option<u32>, StoreError> {
        self.conn
            .query_row(
                "SELECT n, status FROM invocations WHERE run_id = ?1 ORDER BY n DESC LIMIT 1",
                [run_id],
                |row| Ok((row.get::<_, u32>(0)?, row.get::<_, InvocationStatus>(1)?)),
            )
            .optional()
            .ctx(self, "reading the last invocation")
            .map(|last| match last {
                Some((n, InvocationStatus::Abandoned)) => Some(n),
                _ => None,
            })
    }
}

#[cfg(test)]
mod stops_tests {
    use super::Stops;

    #[test]
    fn only_the_part_of_a_stop_inside_the_span_counts() {
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap().as_millisecond();
        let stops = Stops(vec![(
            at("2026-01-01T00:00:10.000Z"),
            at("2026-01-01T00:00:20.000Z"),
        )]);
        let within = |a: &str, b: &str| stops.within(a, b);
        assert_eq!(
            within("2026-01-01T00:00:00Z", "2026-01-01T00:00:30Z"),
            10_000
        );
        assert_eq!(
            within("2026-01-01T00:00:15Z", "2026-01-01T00:00:30Z"),
            5_000
        );
        assert_eq!(
            within("2026-01-01T00:00:00Z", "2026-01-01T00:00:12.5Z"),
            2_500
        );
        assert_eq!(within("2026-01-01T00:00:20Z", "2026-01-01T00:00:30Z"), 0);
        assert_eq!(within("2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"), 0);
        assert_eq!(within("not a time", "2026-01-01T00:00:05Z"), 0);
    }
}
