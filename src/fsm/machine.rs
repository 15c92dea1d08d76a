//! The compiled machine and the run position it advances.
//!
//! A [`Machine`] is immutable once built (only `check` builds one, and only
//! from a file that passed every check): states, transitions and lookup tables.
//! A run's place in it is a [`Position`] — the current state and one counter
//! per bounded transition — and [`Machine::fire`] is a pure step. No I/O.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use std::time::Duration;

use super::bounds::{WallTime, WorstCase};
use super::emit::AgentState;

/// Index of a state in its machine (file order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct StateId(pub(crate) u32);

impl StateId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Where a machine's TOML came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Shipped inside the binary; the file name in `fsm/`.
    Builtin(String),
    File(PathBuf),
}

/// How a terminal state ends the run (`outcome = "success"` in TOML).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, strum::Display, strum::IntoStaticStr)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Ending {
    Success,
    Failure,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StateKind {
    /// The run's first state only: the epic it was started with produces
    /// `event` (the checks refuse an input state anywhere else).
    Input {
        event: String,
    },
    Agent(AgentState),
    /// A gate: the run waits for a person to answer `question`; `modix
    /// approve` raises `events[0]`, `modix reject` `events[1]`. Every
    /// event is handled by a transition (checked).
    Human {
        question: String,
        events: Vec<String>,
    },
    Terminal {
        outcome: Ending,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct State {
    pub name: String,
    #[serde(flatten)]
    pub kind: StateKind,
    pub on_enter: Vec<String>,
    /// Byte range of the state's name in the file.
    #[serde(skip)]
    pub span: Range<usize>,
}

impl State {
    pub fn is_terminal(&self) -> bool {
        matches!(self.kind, StateKind::Terminal { .. })
    }

    pub fn agent(&self) -> Option<&AgentState> {
        match &self.kind {
            StateKind::Agent(a) => Some(a),
            _ => None,
        }
    }

    pub fn is_human(&self) -> bool {
        matches!(self.kind, StateKind::Human { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    pub from: StateId,
    pub event: String,
    pub to: StateId,
    /// How many times this transition may fire in one run.
    pub max: Option<u32>,
    /// Where the run goes when the transition would fire once more than `max`.
    pub exhausted: Option<StateId>,
    /// Byte range of the `[[transitions]]` entry in the file.
    #[serde(skip)]
    pub span: Range<usize>,
    /// Index of this transition's counter in [`Position`], when bounded.
    #[serde(skip)]
    pub(crate) slot: Option<usize>,
}

impl Transition {
    /// The failure class this transition catches, when `check` synthesised
    /// it from a `catch` rule (its event is `catch:<class>`).
    pub fn caught(&self) -> Option<super::FailureClass> {
        super::FailureClass::from_catch_event(&self.event)
    }
}

/// A run's place in a machine: the current state and the bounded-transition counters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Position {
    pub(crate) state: StateId,
    pub(crate) counters: Vec<u32>,
}

impl Position {
    pub fn state(&self) -> StateId {
        self.state
    }

    #[cfg(test)]
    pub fn is_terminal(&self, machine: &Machine) -> bool {
        machine.state(self.state).is_terminal()
    }
}

/// One step taken by [`Machine::fire`].
#[derive(Debug, Clone, PartialEq)]
pub struct Fired {
    pub from: StateId,
    pub to: StateId,
    pub event: String,
    /// Index into [`Machine::transitions`].
    pub transition: usize,
    /// The bound was reached, so the run went to `exhausted` instead of `to`.
    pub redirected: bool,
    /// Times the transition has fired in this run, this step included (bounded only;
    /// a redirect does not count as a firing).
    pub count: u32,
    pub max: Option<u32>,
    pub position: Position,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FireError {
    #[error("the run is in terminal state `{state}`; no event can move it")]
    Terminal { state: String },
    #[error("state `{state}` has no transition on event `{event}`")]
    NoTransition { state: String, event: String },
}

/// A checked, compiled FSM.
#[derive(Debug)]
pub struct Machine {
    pub(crate) id: String,
    pub(crate) version: semver::Version,
    pub(crate) description: String,
    pub(crate) source: Source,
    pub(crate) content_hash: String,
    pub(crate) text: Arc<str>,
    pub(crate) id_span: Range<usize>,
    pub(crate) initial: StateId,
    pub(crate) states: Vec<State>,
    pub(crate) transitions: Vec<Transition>,
    /// Outgoing transition indexes per state; a small vec beats a map at these sizes.
    pub(crate) outgoing: Vec<Vec<usize>>,
    /// Number of bounded transitions (= counters in a position).
    pub(crate) slots: usize,
    pub(crate) worst: WorstCase,
    /// What the weighted worst cases (wall time) walk.
    pub(crate) paths: super::bounds::Paths,
}

/// Edge weight of the graph the checks and the worst case walk: nodes are
/// states (same index), edges carry the transition index; redirect edges
/// (`from → exhausted`) are included and flagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub transition: usize,
    pub redirect: bool,
}

impl Machine {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn version(&self) -> &semver::Version {
        &self.version
    }

    pub fn description(&self) -> &str {
        &self.description
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    /// SHA-256 (hex) of the file text, so a run can record exactly what it ran.
    pub fn content_hash(&self) -> &str {
        &self.content_hash
    }

    /// The TOML text the machine was compiled from.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Byte range of the `id` value in [`Machine::text`].
    pub fn id_span(&self) -> Range<usize> {
        self.id_span.clone()
    }

    pub fn initial(&self) -> StateId {
        self.initial
    }

    /// Panics only if `id` came from another machine.
    pub fn state(&self, id: StateId) -> &State {
        &self.states[id.index()]
    }

    pub fn state_id(&self, name: &str) -> Option<StateId> {
        self.states
            .iter()
            .position(|s| s.name == name)
            .map(|i| StateId(i as u32))
    }

    /// States in file order.
    pub fn states(&self) -> impl Iterator<Item = (StateId, &State)> {
        self.states
            .iter()
            .enumerate()
            .map(|(i, s)| (StateId(i as u32), s))
    }

    pub fn transitions(&self) -> &[Transition] {
        &self.transitions
    }

    /// Where a redrive takes a run that ended in a failure terminal: back to
    /// `to` (not a terminal), every loop counter afresh — the bounds apply
    /// to the redriven part as to a new run. `None` from anything but a
    /// failure terminal.
    pub fn redrive(&self, pos: &Position, to: StateId) -> Option<Position> {
        let from = self.states.get(pos.state.index())?;
        let target = self.states.get(to.index())?;
        let failed = matches!(
            from.kind,
            StateKind::Terminal {
                outcome: Ending::Failure
            }
        );
        (failed && !target.is_terminal()).then(|| Position {
            state: to,
            counters: vec![0; self.slots],
        })
    }

    /// At the initial state, every counter zero.
    pub fn start(&self) -> Position {
        Position {
            state: self.initial,
            counters: vec![0; self.slots],
        }
    }

    /// The transition taken from `pos` on `event`; `pos` itself is not changed.
    pub fn fire(&self, pos: &Position, event: &str) -> Result<Fired, FireError> {
        let state = self
            .states
            .get(pos.state.index())
            .ok_or_else(|| FireError::NoTransition {
                state: format!("#{}", pos.state.0),
                event: event.to_owned(),
            })?;
        if state.is_terminal() {
            return Err(FireError::Terminal {
                state: state.name.clone(),
            });
        }
        let no_transition = || FireError::NoTransition {
            state: state.name.clone(),
            event: event.to_owned(),
        };
        let index = self.outgoing[pos.state.index()]
            .iter()
            .copied()
            .find(|&i| self.transitions[i].event == event)
            .ok_or_else(no_transition)?;
        let t = &self.transitions[index];
        let mut position = pos.clone();
        let (to, redirected, count) = match (t.slot, t.max, t.exhausted) {
            (Some(slot), Some(max), Some(exhausted)) => {
                let counter = position.counters.get_mut(slot).ok_or_else(no_transition)?;
                if *counter < max {
                    *counter += 1;
                    (t.to, false, *counter)
                } else {
                    (exhausted, true, *counter)
                }
            }
            _ => (t.to, false, 0),
        };
        position.state = to;
        Ok(Fired {
            from: t.from,
            to,
            event: t.event.clone(),
            transition: index,
            redirected,
            count,
            max: t.max,
            position,
        })
    }

    /// The longest run the bounds allow, and agent invocations per agent state.
    pub fn worst_case(&self) -> &WorstCase {
        &self.worst
    }

    /// Whether `state` has a transition on `event` (e.g. before raising the
    /// engine event [`super::NO_PROGRESS`], which a state may not handle).
    pub fn has_transition(&self, state: StateId, event: &str) -> bool {
        self.outgoing
            .get(state.index())
            .is_some_and(|out| out.iter().any(|&i| self.transitions[i].event == event))
    }

    /// Most invocations of agent state `state` in one run, retries
    /// included: its visits × (1 + its largest `max_attempts`).
    pub fn worst_invocations(&self, state: StateId) -> Option<u64> {
        let a = self.state(state).agent()?;
        let visits = self.bound_for_visits(state)?;
        Some(visits.saturating_mul(a.attempts_per_visit()))
    }

    /// The longest a run can take, human waits excluded: every agent visit
    /// costs (1 + its retries) × `timeout(state)` plus its longest retry
    /// waits, along the costliest path the bounds allow. `timeout` is the
    /// per-invocation limit the run will apply to that state (its own
    /// `timeout_secs`, the agent's, the project's default), kill grace
    /// included if the caller wants it counted.
    pub fn worst_wall_time(&self, timeout: impl Fn(StateId, &AgentState) -> Duration) -> WallTime {
        let cost: Vec<u64> = self
            .states()
            .map(|(id, s)| match s.agent() {
                Some(a) => {
                    let run = timeout(id, a).saturating_mul(a.attempts_per_visit() as u32);
                    let ms = run.saturating_add(a.worst_retry_wait()).as_millis();
                    u64::try_from(ms).unwrap_or(u64::MAX)
                }
                None => 0,
            })
            .collect();
        let (ms, exact) = self.paths.longest(&cost);
        WallTime {
            total: Duration::from_millis(ms),
            exact,
            human_waits: self.states.iter().any(State::is_human),
        }
    }

    /// [`Machine::worst_wall_time`] with each state's own `timeout_secs`,
    /// else `default_secs` (e.g. [`super::DEFAULT_TIMEOUT_SECS`]).
    pub fn worst_wall_time_with_default(&self, default_secs: u64) -> WallTime {
        self.worst_wall_time(|_, a| Duration::from_secs(a.timeout_secs.unwrap_or(default_secs)))
    }

    /// Most times a run can enter `state` (agent states only).
    pub fn bound_for_visits(&self, state: StateId) -> Option<u64> {
        self.worst
            .visits
            .iter()
            .find(|(s, _)| *s == state)
            .map(|(_, n)| *n)
    }
}
