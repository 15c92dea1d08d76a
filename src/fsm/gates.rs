//! Where a run waits for a person: the `input` state it starts in (the
//! epic) and `human` gates anywhere else.
//!
//! An input state fires its event with the run's epic, so one placed
//! mid-workflow would pass by itself: only the initial state may be one.
//! A gate asks `question` and waits for one of its `events` (`modix
//! approve` raises the first, `modix reject` the second); completeness
//! (`graph_checks`) makes sure each has a transition.

use super::check::{Ctx, required_text, reserved};
use super::machine::{State, StateId, StateKind};
use super::spec::RawState;

/// `kind = "human"`: its question and events, checked.
pub(crate) fn human(name: &str, st: &RawState, cx: &mut Ctx) -> StateKind {
    let question = required_text(st.question.as_ref(), "question", name, &st.kind, cx);
    let Some(list) = &st.events else {
        cx.error(
            "fsm::invalid-field",
            st.kind.span(),
            format!("human state `{name}` has no `events`"),
            "add `events = [\"approved\", \"rejected\"]`: `modix approve` raises the first, `modix reject` the second".into(),
        );
        return StateKind::Human {
            question,
            events: Vec::new(),
        };
    };
    if list.get_ref().is_empty() {
        cx.error(
            "fsm::invalid-field",
            list.span(),
            format!("human state `{name}` lists no events"),
            "list the answers a person can give, e.g. [\"approved\", \"rejected\"]".into(),
        );
    }
    let mut events: Vec<String> = Vec::new();
    for e in list.get_ref() {
        let text = *e.get_ref();
        if text.trim().is_empty() {
            cx.error(
                "fsm::invalid-field",
                e.span(),
                format!("human state `{name}` has an empty event"),
                "give each answer a name".into(),
            );
            continue;
        }
        if reserved(e, cx) {
            continue;
        }
        if events.iter().any(|x| x == text) {
            cx.error(
                "fsm::invalid-field",
                e.span(),
                format!("event `{text}` is listed twice in human state `{name}`"),
                "each answer leads somewhere of its own: remove the repeat".into(),
            );
            continue;
        }
        events.push(text.to_owned());
    }
    StateKind::Human { question, events }
}

/// An input state is the run's start; anywhere else it would fire by
/// itself with the epic.
pub(crate) fn inputs_only_first(states: &[State], initial: StateId, cx: &mut Ctx) {
    for (i, s) in states.iter().enumerate() {
        if i == initial.index() || !matches!(s.kind, StateKind::Input { .. }) {
            continue;
        }
        cx.error(
            "fsm::input-not-initial",
            s.span.clone(),
            format!(
                "input state `{}` is not the initial state; an input state receives the run's epic when it starts and would pass by itself mid-run",
                s.name
            ),
            format!(
                "to wait for a person here, make it a gate: kind = \"human\", question = \"...\", events = [\"approved\", \"rejected\"]; or make `{}` the `initial` state",
                s.name
            ),
        );
    }
}
