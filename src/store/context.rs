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
