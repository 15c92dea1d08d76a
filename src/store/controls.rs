//! What other processes ask of a run, carried through the store so it works
//! from any terminal and survives crashes: stop at the next step boundary,
//! stop now, and pending messages for the run's next suitable agent. The
//! engine watches the run's open controls while it runs and marks each one
//! taken when it acts on it (a stop acknowledged, a message delivered with
//! a step).

use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;

use super::{Ctx, Store, StoreError, now, text_enum_sql};

/// What is asked.
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
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ControlKind {
    /// Stop at the next step boundary.
    Stop,
    /// Stop the running agent (its whole process group) and the run.
    StopNow,
    /// A message for the next agent that takes pending items.
    Pending,
}

text_enum_sql!(ControlKind);

/// One request, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Control {
    pub id: i64,
    pub run_id: String,
    pub kind: ControlKind,
    pub text: Option<String>,
    /// Who asked (`user@host`, pid).
    pub by: String,
    pub at: String,
    /// When the engine acted on it.
    pub taken_at: Option<String>,
    /// For a pending item: the step whose agent got it.
    pub taken_seq: Option<u32>,
}

const COLUMNS: &str = "id, run_id, kind, text, by, at, taken_at, taken_seq";

fn control_from_row(row: &Row<'_>) -> rusqlite::Result<Control> {
    Ok(Control {
        id: row.get(0)?,
        run_id: row.get(1)?,
        kind: row.get(2)?,
        text: row.get(3)?,
        by: row.get(4)?,
        at: row.get(5)?,
        taken_at: row.get(6)?,
        taken_seq: row.get(7)?,
    })
}

impl Store {
    /// Records a request for run `run_id`; its id.
    pub fn add_control(
        &mut self,
        run_id: &str,
        kind: ControlKind,
        text: Option<&str>,
        by: &str,
    ) -> Result<i64, StoreError> {
        let w = self.write_tx()?;
        w.run_state(run_id)?;
        let text = text.map(|t| w.text(t).into_owned());
        w.tx.execute(
            "INSERT INTO controls (run_id, kind, text, by, at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![run_id, kind, text, by, now()],
        )
        .ctx(w.path, "recording a control request")?;
        let id = w.tx.last_insert_rowid();
        w.commit("committing a control request")?;
        Ok(id)
    }

    /// The run's requests not acted on yet, oldest first.
    pub fn open_controls(&self, run_id: &str) -> Result<Vec<Control>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM controls WHERE run_id = ?1 AND taken_at IS NULL ORDER BY id"
            ))
            .ctx(self, "reading control requests")?;
        stmt.query_map([run_id], control_from_row)
            .and_then(|rows| rows.collect())
            .ctx(self, "reading control requests")
    }

    /// The run's requests of `kind`, taken or not, oldest first.
    pub fn controls(&self, run_id: &str, kind: ControlKind) -> Result<Vec<Control>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM controls WHERE run_id = ?1 AND kind = ?2 ORDER BY id"
            ))
            .ctx(self, "reading control requests")?;
        stmt.query_map(params![run_id, kind], control_from_row)
            .and_then(|rows| rows.collect())
            .ctx(self, "reading control requests")
    }

    /// Request `id`, as it stands.
    pub fn control(&self, id: i64) -> Result<Option<Control>, StoreError> {
        self.conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM controls WHERE id = ?1"),
                [id],
                control_from_row,
            )
            .optional()
            .ctx(self, "reading a control request")
    }

    /// Marks requests acted on (stops acknowledged, or superseded). Those
    /// already taken stay as they were.
    pub fn take_controls(&mut self, ids: &[i64]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let w = self.write_tx()?;
        let at = now();
        for id in ids {
            w.tx.prepare_cached(
                "UPDATE controls SET taken_at = ?2 WHERE id = ?1 AND taken_at IS NULL",
            )
            .and_then(|mut s| s.execute(params![id, at]))
            .ctx(w.path, "marking a control request taken")?;
        }
        w.commit("committing taken control requests")
    }
}
