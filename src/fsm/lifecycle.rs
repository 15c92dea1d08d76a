//! The two roles a machine can play, and the lifecycle view of one.
//!
//! A **workflow** is what `modix go` runs: its agent states name agents of
//! the project. A **lifecycle** is what each agent invocation runs under
//! (`execution_fsm_v1` by default: IDLE → EXECUTING → COMPLETED/FAILED): its
//! agent state is `self`, the agent being invoked, driven by the same outcome
//! the workflow's emit rules see. A machine's role follows from its shape,
//! so `validate` can refuse a workflow used as a lifecycle and the reverse.

use std::sync::Arc;

use serde_json::Value;

use super::{Ending, Machine, Outcome, Position, StateKind};

/// What a machine is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Workflow,
    Lifecycle,
}

/// The agent name a lifecycle's agent state uses for "the agent being invoked".
pub const SELF_AGENT: &str = "self";

impl Machine {
    /// A lifecycle when an agent state names `self`; a workflow otherwise.
    pub fn role(&self) -> Role {
        let is_self = |k: &StateKind| matches!(k, StateKind::Agent(a) if a.agent == SELF_AGENT);
        if self.states().any(|(_, s)| is_self(&s.kind)) {
            Role::Lifecycle
        } else {
            Role::Workflow
        }
    }
}

/// One lifecycle step as (from, event, to).
pub type Step = (String, String, String);

/// A lifecycle machine, checked to have the shape the orchestrator drives.
#[derive(Debug)]
pub struct Lifecycle {
    machine: Arc<Machine>,
    started: Position,
    start_step: Step,
    /// The failure terminal an abandoned invocation is recorded as reaching.
    failed: String,
}

impl Lifecycle {
    /// The machine must start in an input state whose event leads to an
    /// agent state, and have a failure terminal; the error says what is wrong.
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
        let failed = machine
            .states()
            .find(|(_, s)| {
                matches!(
                    s.kind,
                    StateKind::Terminal {
                        outcome: Ending::Failure
                    }
                )
            })
            .map(|(_, s)| s.name.clone())
            .ok_or_else(|| {
                format!(
                    "lifecycle FSM `{}` has no failure terminal (where an abandoned invocation ends)",
                    machine.id()
                )
            })?;
        let start_step = (
            initial.name.clone(),
            event.clone(),
            machine.state(fired.to).name.clone(),
        );
        Ok(Lifecycle {
            started: fired.position,
            machine,
            start_step,
            failed,
        })
    }

    pub fn id(&self) -> &str {
        self.machine.id()
    }

    /// The first step, recorded when the invocation starts.
    pub fn start_step(&self) -> &Step {
        &self.start_step
    }

    /// The step recorded for an invocation whose process died with modix:
    /// from the state it was last seen in to the failure terminal.
    pub fn abandoned_step(&self, last_state: &str) -> Step {
        (
            last_state.to_owned(),
            "abandoned".into(),
            self.failed.clone(),
        )
    }

    /// The steps after the process ended, up to a terminal state (or as far
    /// as rules lead), and whether that terminal is a success.
    pub fn finish_steps(&self, outcome: Outcome, output: Option<&Value>) -> (Vec<Step>, bool) {
        let mut pos = self.started.clone();
        let mut steps = Vec::new();
        // Bounded by the machine's own worst case; agent states see the same outcome.
        for _ in 0..=self.machine.worst_case().transitions {
            let state = self.machine.state(pos.state());
            let event = match &state.kind {
                StateKind::Terminal { outcome } => return (steps, *outcome == Ending::Success),
                StateKind::Agent(a) => a.derive_event(outcome, output).map(str::to_owned),
                StateKind::Input { event } => Some(event.clone()),
                // Nobody answers inside one invocation.
                StateKind::Human { .. } => None,
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
