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
    /// By state index: the seq of the last transition into it, and out of it.
    entered_by: Vec<u32>,
    left_by: Vec<u32>,
    transitions: u32,
}

impl Cursor {
    /// The position the recorded transitions lead to, checked against the machine.
    pub fn replay(machine: &Machine, history: &[TransitionRecord]) -> Result<Cursor, RunError> {
        let states = machine.states().count();
        let mut cursor = Cursor {
            pos: machine.start(),
            visits: vec![0; states],
            entered_by: vec![0; states],
            left_by: vec![0; states],
            transitions: 0,
        };
        cursor.visits[machine.initial().index()] = 1;
        for t in history {
            if t.event == crate::fsm::REDRIVE && machine.state(cursor.state()).is_terminal() {
                let to = machine.state_id(&t.to).ok_or_else(|| {
                    RunError::Replay(format!(
                        "recorded transition #{} redrives to {}, which the workflow no longer has",
                        t.seq, t.to
                    ))
                })?;
                cursor.redrive(machine, to).ok_or_else(|| {
                    RunError::Replay(format!(
                        "recorded transition #{} redrives from {} to {}, which is not possible",
                        t.seq, t.from, t.to
                    ))
                })?;
                continue;
            }
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

    /// The seq of the transition that last brought the run into `state`
    /// (0: never, or it is the initial state).
    pub fn entered_by(&self, state: StateId) -> u32 {
        self.entered_by[state.index()]
    }

    /// The seq of the last transition out of `state` (0: never left).
    pub fn left_by(&self, state: StateId) -> u32 {
        self.left_by[state.index()]
    }

    /// A failed run taken back to `to`: counters and visits afresh, `to`
    /// entered once. `None` when the machine refuses it.
    pub fn redrive(&mut self, machine: &Machine, to: StateId) -> Option<()> {
        let from = self.pos.state();
        self.pos = machine.redrive(&self.pos, to)?;
        self.visits.iter_mut().for_each(|v| *v = 0);
        self.visits[to.index()] = 1;
        self.transitions += 1;
        self.left_by[from.index()] = self.transitions;
        self.entered_by[to.index()] = self.transitions;
        Some(())
    }

    pub fn advance(&mut self, fired: &Fired) {
        self.visits[fired.to.index()] += 1;
        self.transitions += 1;
        self.left_by[fired.from.index()] = self.transitions;
        self.entered_by[fired.to.index()] = self.transitions;
        self.pos = fired.position.clone();
    }
}
