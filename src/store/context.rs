//! What an agent is told of the run so far, read for each invocation with
//! queries that touch only what it needs: the latest output of each state,
//! the step that brought the run into a state, and the notes people left
//! since a state last ran.

use rusqlite::{OptionalExtension, params};

use super::query::{
    MESSAGE_QUERY, MessageRecord, TRANSITION_COLUMNS, TransitionRecord, message_from_row,
    transition_from_row,
};
use super::{Ctx, Store, StoreError};

/// Message kinds that are not a state's output.
pub const NOT_OUTPUTS: [&str; 3] = ["feedback", "epic", "note"];

impl Store {
    /// The latest output message of every state of the run, by state name.
    pub fn latest_outputs(&self, run_id: &str) -> Result<Vec<MessageRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "{MESSAGE_QUERY} WHERE m.id IN (SELECT max(id) FROM messages \
                 WHERE run_id = ?1 AND kind NOT IN (?2, ?3, ?4) GROUP BY state) ORDER BY m.id"
            ))
            .ctx(self, "reading the latest outputs")?;
        let [a, b, c] = NOT_OUTPUTS;
        stmt.query_map(params![run_id, a, b, c], message_from_row)
            .and_then(|rows| rows.collect())
            .ctx(self, "reading the latest outputs")
    }

    /// The latest message of every kind in the run.
    fn latest_of_each_kind(&self, run_id: &str) -> Result<Vec<MessageRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "{MESSAGE_QUERY} WHERE m.id IN (SELECT max(id) FROM messages \
                 WHERE run_id = ?1 GROUP BY kind) ORDER BY m.id"
            ))
            .ctx(self, "reading the latest messages")?;
        stmt.query_map(params![run_id], message_from_row)
            .and_then(|rows| rows.collect())
            .ctx(self, "reading the latest messages")
    }

    /// Transition `seq` of the run.
    pub fn transition(
        &self,
        run_id: &str,
        seq: u32,
    ) -> Result<Option<TransitionRecord>, StoreError> {
        self.conn
            .prepare_cached(&format!(
                "SELECT {TRANSITION_COLUMNS} WHERE t.run_id = ?1 AND t.seq = ?2"
            ))
            .and_then(|mut s| {
                s.query_row(params![run_id, seq], transition_from_row)
                    .optional()
            })
            .ctx(self, "reading a transition")
    }

    /// The messages step `seq` of the run left.
    pub fn messages_at(&self, run_id: &str, seq: u32) -> Result<Vec<MessageRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "{MESSAGE_QUERY} WHERE m.run_id = ?1 AND m.seq = ?2 ORDER BY m.id"
            ))
            .ctx(self, "reading a step's messages")?;
        stmt.query_map(params![run_id, seq], message_from_row)
            .and_then(|rows| rows.collect())
            .ctx(self, "reading a step's messages")
    }

    /// People's notes (gate answers, redrives) left after step `seq`.
    pub fn notes_after(&self, run_id: &str, seq: u32) -> Result<Vec<MessageRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "{MESSAGE_QUERY} WHERE m.run_id = ?1 AND m.kind = 'note' AND m.seq > ?2 \
                 ORDER BY m.id"
            ))
            .ctx(self, "reading notes")?;
        stmt.query_map(params![run_id, seq], message_from_row)
            .and_then(|rows| rows.collect())
            .ctx(self, "reading notes")
    }
}

/// What an agent is handed of the run's latest steps, kept current by
/// reading only the messages written since the last read: the latest output
/// of every state and the messages of the run's latest step. Found once per
/// drive by [`Store::run_tail`] (reading the run's messages), then
/// [`Store::refresh_tail`] at each step reads only what is new, so a step's
/// cost does not grow with the run's length.
#[derive(Debug)]
pub struct RunTail {
    pub(super) run_id: String,
    /// Every message of the run with an id up to here has been read.
    pub(super) watermark: i64,
    latest: std::collections::BTreeMap<String, MessageRecord>,
    /// The latest message of each kind.
    by_kind: std::collections::BTreeMap<String, MessageRecord>,
    /// People's notes (gate answers, redrives), oldest first: few per run.
    notes: Vec<MessageRecord>,
    last_seq: u32,
    last_step: Vec<MessageRecord>,
    /// Current as of the step this process just recorded, which added its
    /// own messages (`Store::record_step_tailed`): the next refresh has
    /// nothing to read. So every step of the run this process records goes
    /// through `record_step_tailed` with this tail.
    pub(super) fresh: bool,
}

impl RunTail {
    /// The latest output message of every state, by state name.
    pub fn latest_outputs(&self) -> impl Iterator<Item = &MessageRecord> {
        self.latest.values()
    }

    /// The run's latest message of `kind` (`task_spec`, …).
    pub fn latest_of(&self, kind: &str) -> Option<&MessageRecord> {
        self.by_kind.get(kind)
    }

    /// People's notes left after step `seq`, oldest first.
    pub fn notes_after(&self, seq: u32) -> impl Iterator<Item = &MessageRecord> {
        self.notes.iter().filter(move |m| m.seq > seq)
    }

    /// The messages of step `seq`, when it is the latest step read.
    pub fn messages_at(&self, seq: u32) -> Option<&[MessageRecord]> {
        (seq == self.last_seq).then_some(self.last_step.as_slice())
    }

    /// The messages of a step just recorded, when the tail was current
    /// before it: the tail is current after it.
    pub(super) fn took_own(&mut self, messages: Vec<MessageRecord>) {
        for m in messages {
            self.watermark = self.watermark.max(m.id);
            self.take(m);
        }
        self.fresh = true;
    }

    fn take(&mut self, m: MessageRecord) {
        if m.seq > self.last_seq {
            self.last_seq = m.seq;
            self.last_step.clear();
        }
        if m.seq == self.last_seq {
            self.last_step.push(m.clone());
        }
        if m.kind == "note" {
            self.notes.push(m.clone());
        }
        self.by_kind.insert(m.kind.clone(), m.clone());
        if !NOT_OUTPUTS.contains(&m.kind.as_str()) {
            self.latest.insert(m.state.clone(), m);
        }
    }
}

impl Store {
    /// The run's tail as it stands: its latest outputs and the messages of
    /// its step `last_seq` (its latest).
    pub fn run_tail(&self, run_id: &str, last_seq: u32) -> Result<RunTail, StoreError> {
        // Taken first: anything written after it is read by the next refresh.
        let watermark: i64 = self
            .conn
            .prepare_cached("SELECT coalesce(max(id), 0) FROM messages")
            .and_then(|mut s| s.query_row([], |row| row.get(0)))
            .ctx(self, "reading the run's messages")?;
        let mut tail = RunTail {
            run_id: run_id.to_owned(),
            watermark,
            latest: Default::default(),
            by_kind: Default::default(),
            notes: Vec::new(),
            last_seq,
            last_step: Vec::new(),
            fresh: false,
        };
        for m in self.latest_outputs(run_id)? {
            tail.latest.insert(m.state.clone(), m);
        }
        for m in self.latest_of_each_kind(run_id)? {
            tail.by_kind.insert(m.kind.clone(), m);
        }
        tail.notes = self.notes_after(run_id, 0)?;
        tail.last_step = self.messages_at(run_id, last_seq)?;
        tail.latest.retain(|_, m| m.id <= watermark);
        tail.by_kind.retain(|_, m| m.id <= watermark);
        tail.notes.retain(|m| m.id <= watermark);
        tail.last_step.retain(|m| m.id <= watermark);
        self.refresh_tail(&mut tail)?;
        Ok(tail)
    }

    /// Reads the run's messages written since the tail was last read.
    pub fn refresh_tail(&self, tail: &mut RunTail) -> Result<(), StoreError> {
        if std::mem::take(&mut tail.fresh) {
            return Ok(());
        }
        let mut stmt = self
            .conn
            .prepare_cached(&new_messages_sql())
            .ctx(self, "reading new messages")?;
        let new: Vec<MessageRecord> = stmt
            .query_map(params![tail.run_id, tail.watermark], message_from_row)
            .and_then(|rows| rows.collect())
            .ctx(self, "reading new messages")?;
        for m in new {
            tail.watermark = tail.watermark.max(m.id);
            tail.take(m);
        }
        Ok(())
    }
}

impl super::Writer<'_> {
    /// Whether the run has messages after id `watermark` (see
    /// [`new_messages_sql`] on `+run_id`).
    pub(super) fn written_since(&self, run_id: &str, watermark: i64) -> Result<bool, StoreError> {
        self.tx
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM messages WHERE id > ?2 AND +run_id = ?1)")
            .and_then(|mut s| s.query_row(params![run_id, watermark], |row| row.get(0)))
            .ctx(self.path, "reading new messages")
    }
}

/// The run's (`?1`) messages after id `?2`. `+m.run_id` keeps SQLite on the
/// primary key's range (the newest messages of every run) instead of the
/// run's whole index range.
pub(super) fn new_messages_sql() -> String {
    format!("{MESSAGE_QUERY} WHERE m.id > ?2 AND +m.run_id = ?1 ORDER BY m.id")
}
