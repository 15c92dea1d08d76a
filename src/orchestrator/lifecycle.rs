//! The lifecycle FSM each agent invocation runs under (`execution_fsm_v1` by
//! default: IDLE → EXECUTING → COMPLETED/FAILED), driven by the same outcome
//! the workflow's emit rules see.

use std::sync::Arc;

use crate::fsm::{InvocationOutcome, Machine, Outcome, Position, StateKind};

/// A lifecycle machine, checked to have the shape the orchestrator drives.
pub struct Lifecycle {
    machine: Arc<Machine>,
    started: Position,
    start_step: (String, String, String),
}

impl Lifecycle {
    /// The machine must start in an input state whose event leads to an agent state.
    pub fn new(machine: Arc<Machine>) -> Result<Self, String> {
        let start = machine.start();
        let initial = machine.state(start.state());
        let StateKind::Input { event } = &initial.kind else {
            return Err(format!(
                "lifecycle FSM `{}` must start in an input state (its start event begins the invocation)",
                machine.id()
            ));
        };
        let fired = machine.fire(&start, event).map_err(|e| e.to_string())?;
        if !matches!(machine.state(fired.to).kind, StateKind::Agent(_)) {
            return Err(format!(
                "lifecycle FSM `{}`: `{event}` must lead to an agent state",
                machine.id()
            ));
        }
        let start_step = (
            initial.name.clone(),
            event.clone(),
            machine.state(fired.to).name.clone(),
        );
        Ok(Lifecycle {
            started: fired.position,
            machine,
            start_step,
        })
    }

    /// The first step, recorded when the invocation starts: (from, event, to).
    pub fn start_step(&self) -> (String, String, String) {
        self.start_step.clone()
    }

    /// The steps after the process ended, up to a terminal state (or as far as rules lead).
    pub fn finish_steps(
        &self,
        outcome: &InvocationOutcome,
    ) -> (Vec<(String, String, String)>, bool) {
        let mut pos = self.started.clone();
        let mut steps = Vec::new();
        // Bounded by the machine's own worst case; agent states see the same outcome.
        for _ in 0..=self.machine.worst_case().transitions {
            let state = self.machine.state(pos.state());
            let event = match &state.kind {
                StateKind::Terminal { outcome } => return (steps, *outcome == Outcome::Success),
                StateKind::Agent(a) => a.derive_event(outcome).map(str::to_owned),
                StateKind::Input { event } => Some(event.clone()),
            };
            let Some(event) = event else { break };
            let Ok(fired) = self.machine.fire(&pos, &event) else {
                break;
            };
            steps.push((
                state.name.clone(),
                event,
                self.machine.state(fired.to).name.clone(),
            ));
            pos = fired.position;
        }
        (steps, false)
    }
}
