//! Where a run stands, kept in one place: its position in the machine (state
//! and bounded-transition counters), how often it entered each state (the
//! attempt numbers) and how many transitions it recorded. Built once from
//! the record by replaying it through the machine — so a resume continues
//! exactly where the record ends, and a record that no longer fits the
//! workflow is refused — then advanced with every committed step.

use super::RunError;
use crate::fsm::{Fired, Machine, Position, StateId};
use crate::store::TransitionRecord;

pub(super) struct Cursor {
    pos: Position,
    /// Times the run entered each state, by state index (the initial state
    /// counts as entered).
    visits: Vec<u32>,
    transitions: u32,
}

impl Cursor {
    /// The position the recorded transitions lead to, checked against the machine.
    pub fn replay(machine: &Machine, history: &[TransitionRecord]) -> Result<Cursor, RunError> {
        let mut cursor = Cursor {
            pos: machine.start(),
            visits: vec![0; machine.states().count()],
            transitions: 0,
        };
        cursor.visits[machine.initial().index()] = 1;
        for t in history {
            let fired = machine.fire(&cursor.pos, &t.event).map_err(|e| {
                RunError::Replay(format!(
                    "recorded transition #{} cannot be replayed: {e}",
                    t.seq
                ))
            })?;
            let now = &machine.state(fired.to).name;
            if *now != t.to {
                return Err(RunError::Replay(format!(
                    "recorded transition #{} went to {} but the workflow now leads to {now}",
                    t.seq, t.to
                )));
            }
            cursor.advance(&fired);
        }
        Ok(cursor)
    }

    pub fn position(&self) -> &Position {
        &self.pos
    }

    pub fn state(&self) -> StateId {
        self.pos.state()
    }

    /// How many times the run has entered `state`: 1 on the first visit.
    pub fn visits(&self, state: StateId) -> u32 {
        self.visits[state.index()]
    }

    pub fn transitions(&self) -> u32 {
        self.transitions
    }

    pub fn advance(&mut self, fired: &Fired) {
        self.visits[fired.to.index()] += 1;
        self.transitions += 1;
        self.pos = fired.position.clone();
    }
}
