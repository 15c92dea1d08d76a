//! A run's position from its record: replaying the recorded transitions
//! through the machine (so a resume continues exactly where the record ends,
//! and a record that no longer fits the workflow is refused), and counting
//! visits for attempt numbers.

use super::OrchestratorError;
use crate::fsm::{Machine, Position, StateId};
use crate::store::TransitionRecord;

/// The position a run's recorded transitions lead to, checked against the machine.
pub fn replay(
    machine: &Machine,
    history: &[TransitionRecord],
) -> Result<Position, OrchestratorError> {
    let mut pos = machine.start();
    for t in history {
        let fired = machine.fire(&pos, &t.event).map_err(|e| {
            OrchestratorError::Workflow(format!(
                "recorded transition #{} cannot be replayed: {e}",
                t.seq
            ))
        })?;
        if machine.state(fired.to).name != t.to {
            return Err(OrchestratorError::Workflow(format!(
                "recorded transition #{} went to {} but the workflow now leads to {}",
                t.seq,
                t.to,
                machine.state(fired.to).name
            )));
        }
        pos = fired.position;
    }
    Ok(pos)
}

/// How many times the run has entered `state` (the initial state counts as entered).
pub fn visits(machine: &Machine, history: &[TransitionRecord], state: StateId) -> u32 {
    let name = &machine.state(state).name;
    let entered = history.iter().filter(|t| &t.to == name).count() as u32;
    entered + u32::from(machine.initial() == state)
}
