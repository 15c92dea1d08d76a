//! The workflow language's newer keys through the compiler: `retry` and
//! `catch`, human gates, the input state's place, engine events, and the
//! worst case with retries and wall time.

use std::time::Duration;

use super::{CompileOptions, FailureClass, Jitter, Machine, StateKind, compile_str};
use crate::diagnostics::{Diagnostic, Severity};

/// A workflow: INIT → WORK (an agent with `extra` keys) → DONE/FAILED, with
/// `more` appended (states or transitions).
fn workflow(extra: &str, more: &str) -> String {
    format!(
        r#"id = "w"
version = "1.0.0"
initial = "INIT"

[states.INIT]
kind = "input"
event = "go"

[states.WORK]
kind = "agent"
agent = "worker"
output = "any"
emit = [
  {{ on = "output", event = "ok" }},
  {{ on = "invalid_output", event = "bad" }},
  {{ on = "process_error", event = "bad" }},
  {{ on = "timeout", event = "bad" }},
]
{extra}

[states.DONE]
kind = "terminal"
outcome = "success"

[states.FAILED]
kind = "terminal"
outcome = "failure"

[[transitions]]
from = "INIT"
event = "go"
to = "WORK"

[[transitions]]
from = "WORK"
event = "ok"
to = "DONE"

[[transitions]]
from = "WORK"
event = "bad"
to = "FAILED"
{more}"#
    )
}

const RETRY: &str = r#"retry = [{ on = ["rate_limited", "network"], max_attempts = 3, interval_secs = 2, backoff_rate = 3.0, max_delay_secs = 10, jitter = "equal" }]"#;
const CATCH: &str = r#"catch = [{ on = ["auth", "not_found", "bad_invocation", "budget_exceeded"], next = "FAILED" }]"#;

fn compile(text: &str) -> (Option<Machine>, Vec<Diagnostic>) {
    let (m, d) = compile_str(text, "w.toml", &CompileOptions::default());
    (m, d.items().to_vec())
}

/// The machine, which must compile without any diagnostic.
fn clean(text: &str) -> Machine {
    let (m, d) = compile(text);
    assert!(d.is_empty(), "{d:#?}");
    m.expect("compiles")
}

/// The one error `text` must have: its code, and text its message and help contain.
fn error(text: &str, code: &str, said: &[&str]) {
    let (m, d) = compile(text);
    assert!(m.is_none(), "compiled despite {code}");
    let errors: Vec<&Diagnostic> = d.iter().filter(|d| d.severity == Severity::Error).collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].code, code, "{errors:#?}");
    let all = format!(
        "{} {}",
        errors[0].message,
        errors[0].help.clone().unwrap_or_default()
    );
    for s in said {
        assert!(all.contains(s), "{s:?} not in {all:?}");
    }
}

fn work(m: &Machine) -> &super::AgentState {
    let id = m.state_id("WORK").expect("WORK");
    m.state(id).agent().expect("agent")
}

#[test]
fn retry_and_catch_are_typed_on_the_agent_state() {
    let m = clean(&workflow(&format!("{RETRY}\n{CATCH}"), ""));
    let a = work(&m);
    let r = &a.retry[0];
    assert_eq!(r.on, [FailureClass::RateLimited, FailureClass::Network]);
    assert_eq!(
        (r.max_attempts, r.interval_secs, r.max_delay_secs),
        (3, 2, Some(10))
    );
    assert_eq!((r.backoff_rate, r.jitter), (3.0, Jitter::Equal));
    assert_eq!(a.catch[0].next, "FAILED");
    // Defaults: a wait of 1 s, doubling, no cap but a day, no jitter.
    let m = clean(&workflow(
        &format!("retry = [{{ on = [\"overloaded\"], max_attempts = 1 }}]\n{CATCH}"),
        "",
    ));
    let r = &work(&m).retry[0];
    assert_eq!((r.interval_secs, r.backoff_rate), (1, 2.0));
    assert_eq!((r.max_delay_secs, r.jitter), (None, Jitter::None));
}

#[test]
fn retry_after_counts_every_retry_of_the_visit() {
    let m = clean(&workflow(&format!("{RETRY}\n{CATCH}"), ""));
    let a = work(&m);
    let wait = |class, retried| a.retry_after(class, retried, 1.0);
    // 2 s, 6 s, then 18 s capped at 10 s; equal jitter with fraction 1 is the whole delay.
    assert_eq!(
        wait(FailureClass::RateLimited, 0),
        Some(Duration::from_secs(2))
    );
    assert_eq!(wait(FailureClass::Network, 1), Some(Duration::from_secs(6)));
    assert_eq!(
        wait(FailureClass::RateLimited, 2),
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        wait(FailureClass::RateLimited, 3),
        None,
        "max_attempts used up"
    );
    assert_eq!(
        a.retry_after(FailureClass::Network, 0, 0.0),
        Some(Duration::from_secs(1))
    );
    assert_eq!(wait(FailureClass::Auth, 0), None, "not retried");
    assert_eq!(a.caught(FailureClass::Auth), Some("catch:auth"));
    assert_eq!(a.caught(FailureClass::RateLimited), None);
    assert_eq!((a.max_retries(), a.attempts_per_visit()), (3, 4));
    assert_eq!(a.worst_retry_wait(), Duration::from_secs(2 + 6 + 10));
}

#[test]
fn a_caught_class_is_a_transition_of_the_machine() {
    let m = clean(&workflow(&format!("{RETRY}\n{CATCH}"), ""));
    let pos = m.fire(&m.start(), "go").expect("go").position;
    let f = m.fire(&pos, "catch:not_found").expect("caught");
    assert_eq!(m.state(f.to).name, "FAILED");
    let t = &m.transitions()[f.transition];
    assert_eq!(t.caught(), Some(FailureClass::NotFound));
    // The file's own transitions come first; the catches after.
    assert!(m.transitions()[..3].iter().all(|t| t.caught().is_none()));
    assert_eq!(m.transitions().len(), 3 + 4);
    assert!(m.has_transition(pos.state(), "catch:auth"));
    assert!(!m.has_transition(pos.state(), "catch:crashed"));
}

#[test]
fn failure_classes_are_checked_with_suggestions() {
    let text = workflow(r#"retry = [{ on = ["rate_limit"], max_attempts = 2 }]"#, "");
    error(
        &text,
        "fsm::unknown-class",
        &["`rate_limit`", "did you mean `rate_limited`?"],
    );
    let text = workflow(r#"catch = [{ on = ["auht"], next = "FAILED" }]"#, "");
    error(&text, "fsm::unknown-class", &["did you mean `auth`?"]);
    let text = workflow(r#"catch = [{ on = [], next = "FAILED" }]"#, "");
    error(&text, "fsm::invalid-field", &["lists no failure class"]);
}

#[test]
fn a_retry_must_be_bounded() {
    let no_max = workflow(r#"retry = [{ on = ["network"], interval_secs = 5 }]"#, "");
    error(
        &no_max,
        "fsm::unbounded-retry",
        &["no `max_attempts`", "1 to 10"],
    );
    let absurd = workflow(r#"retry = [{ on = ["network"], max_attempts = 1000 }]"#, "");
    error(
        &absurd,
        "fsm::unbounded-retry",
        &["more than 10 retries", "bounded transition"],
    );
    let zero = workflow(r#"retry = [{ on = ["network"], max_attempts = 0 }]"#, "");
    error(&zero, "fsm::invalid-field", &["not a positive number"]);
}

#[test]
fn retry_values_are_checked() {
    let cases = [
        (r#"interval_secs = 0"#, "interval_secs = 0 is out of range"),
        (
            r#"interval_secs = -3"#,
            "interval_secs = -3 is out of range",
        ),
        (
            r#"max_delay_secs = 100000"#,
            "max_delay_secs = 100000 is out of range",
        ),
        (
            r#"interval_secs = 30, max_delay_secs = 10"#,
            "shorter than interval_secs",
        ),
        (
            r#"backoff_rate = 0.5"#,
            "backoff_rate = 0.5 is out of range",
        ),
        (
            r#"backoff_rate = nan"#,
            "backoff_rate = NaN is out of range",
        ),
    ];
    for (keys, said) in cases {
        let text = workflow(
            &format!(r#"retry = [{{ on = ["network"], max_attempts = 2, {keys} }}]"#),
            "",
        );
        error(&text, "fsm::invalid-field", &[said]);
    }
    let text = workflow(
        r#"retry = [{ on = ["network"], max_attempts = 2, jitter = "fulll" }]"#,
        "",
    );
    error(
        &text,
        "fsm::invalid-field",
        &["unknown jitter `fulll`", "did you mean `full`?"],
    );
    let text = workflow(
        r#"retry = [{ on = ["network"], max_attempts = 2, tries = 1 }]"#,
        "",
    );
    error(&text, "fsm::unknown-key", &["unknown field `tries`"]);
}

#[test]
fn a_class_belongs_to_one_retry_and_one_catch() {
    let twice = workflow(
        r#"retry = [{ on = ["network"], max_attempts = 2 }, { on = ["overloaded", "network"], max_attempts = 3 }]"#,
        "",
    );
    error(
        &twice,
        "fsm::duplicate-class",
        &["`network`", "retry rule on line"],
    );
    let twice = workflow(
        r#"catch = [{ on = ["auth"], next = "FAILED" }, { on = ["auth"], next = "DONE" }]"#,
        "",
    );
    error(&twice, "fsm::duplicate-class", &["`auth`", "catch rule"]);
    // Retried first, then caught: allowed.
    let both = workflow(
        &format!(
            r#"retry = [{{ on = ["auth"], max_attempts = 1 }}]{}{CATCH}"#,
            "\n"
        ),
        "",
    );
    clean(&both);
}

#[test]
fn a_catch_must_go_to_a_state() {
    let text = workflow(r#"catch = [{ on = ["auth"], next = "FAILD" }]"#, "");
    error(
        &text,
        "fsm::unknown-state",
        &["goes to unknown state `FAILD`", "did you mean `FAILED`?"],
    );
}

#[test]
fn a_catch_back_into_a_loop_is_an_unbounded_cycle() {
    let text = workflow(r#"catch = [{ on = ["crashed"], next = "INIT" }]"#, "");
    error(
        &text,
        "fsm::unbounded-cycle",
        &["INIT → WORK → INIT", "a `catch` leads back"],
    );
}

#[test]
fn catch_events_are_reserved() {
    let text = workflow(
        "",
        "\n[[transitions]]\nfrom = \"WORK\"\nevent = \"catch:auth\"\nto = \"FAILED\"\n",
    );
    error(&text, "fsm::reserved-event", &["reserved prefix `catch:`"]);
}

#[test]
fn retry_and_catch_are_for_agent_states_of_workflows() {
    let text = workflow("", "").replace(
        "kind = \"input\"\nevent = \"go\"",
        "kind = \"input\"\nevent = \"go\"\ncatch = []",
    );
    error(
        &text,
        "fsm::invalid-field",
        &["`catch` is not allowed in input state `INIT`"],
    );
    let lifecycle = workflow(CATCH, "").replace("agent = \"worker\"", "agent = \"self\"");
    error(
        &lifecycle,
        "fsm::invalid-field",
        &["lifecycle state `WORK`"],
    );
}

#[test]
fn an_input_state_only_starts_the_run() {
    let text = workflow(CATCH, "").replace(
        "[states.DONE]",
        "[states.WAIT]\nkind = \"input\"\nevent = \"resume\"\n\n[states.DONE]",
    ) + "\n[[transitions]]\nfrom = \"WAIT\"\nevent = \"resume\"\nto = \"DONE\"\n";
    let text = text.replace(
        "event = \"ok\"\nto = \"DONE\"",
        "event = \"ok\"\nto = \"WAIT\"",
    );
    error(
        &text,
        "fsm::input-not-initial",
        &["`WAIT` is not the initial state", "kind = \"human\""],
    );
}

const GATE: &str = r#"
[states.APPROVE]
kind = "human"
question = "Ship it?"
events = ["approved", "rejected"]

[[transitions]]
from = "APPROVE"
event = "approved"
to = "DONE"

[[transitions]]
from = "APPROVE"
event = "rejected"
to = "WORK"
max = 2
exhausted = "FAILED"
"#;

/// WORK —ok→ APPROVE —approved→ DONE, —rejected→ WORK (at most twice).
fn gated() -> String {
    workflow(CATCH, GATE).replace(
        "event = \"ok\"\nto = \"DONE\"",
        "event = \"ok\"\nto = \"APPROVE\"",
    )
}

#[test]
fn human_gates_wait_for_their_events() {
    let m = clean(&gated());
    let id = m.state_id("APPROVE").expect("gate");
    let StateKind::Human { question, events } = &m.state(id).kind else {
        panic!("not a gate");
    };
    assert_eq!(question, "Ship it?");
    assert_eq!(events, &["approved", "rejected"]);
    // go, (ok, rejected) × 2, ok, then approved or the redirect: 7.
    let w = m.worst_case();
    assert_eq!(w.transitions, 7);
    assert_eq!(w.gates, [(id, 3)]);
    assert_eq!(
        m.bound_for_visits(m.state_id("WORK").expect("WORK")),
        Some(3)
    );
    let mermaid = super::render::mermaid(&m, &Default::default());
    assert!(mermaid.contains("{{\"APPROVE<br/>human\"}}"), "{mermaid}");
    let dot = super::render::dot(&m, &Default::default());
    assert!(dot.contains("shape=hexagon"), "{dot}");
}

#[test]
fn gate_events_are_checked() {
    let unhandled = gated().replace(
        "event = \"rejected\"\nto = \"WORK\"\nmax = 2\nexhausted = \"FAILED\"\n",
        "event = \"maybe\"\nto = \"FAILED\"\n",
    );
    let (m, d) = compile(&unhandled);
    assert!(m.is_none());
    assert!(
        d.iter()
            .any(|d| d.code == "fsm::unhandled-event" && d.message.contains("`rejected`")),
        "{d:#?}"
    );
    assert!(
        d.iter()
            .any(|d| d.code == "fsm::dead-transition" && d.message.contains("maybe")),
        "{d:#?}"
    );
    let cases = [
        (
            "question = \"Ship it?\"",
            "question = \" \"",
            "`question` is empty",
        ),
        ("question = \"Ship it?\"\n", "", "has no `question`"),
        (
            "events = [\"approved\", \"rejected\"]",
            "events = []",
            "lists no events",
        ),
        (
            "events = [\"approved\", \"rejected\"]",
            "events = [\"approved\", \"approved\"]",
            "listed twice",
        ),
        (
            "events = [\"approved\", \"rejected\"]\n",
            "",
            "has no `events`",
        ),
    ];
    for (from, to, said) in cases {
        let text = gated().replace(from, to);
        let (m, d) = compile(&text);
        assert!(m.is_none(), "{said}");
        assert!(
            d.iter()
                .any(|d| d.code == "fsm::invalid-field" && d.message.contains(said)),
            "{said}: {d:#?}"
        );
    }
}

#[test]
fn engine_events_are_not_dead() {
    let more = "\n[[transitions]]\nfrom = \"WORK\"\nevent = \"no_progress\"\nto = \"FAILED\"\n";
    clean(&workflow(CATCH, more));
    let (m, d) = compile(&workflow(CATCH, &more.replace("no_progress", "no_progres")));
    assert!(m.is_some());
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].code, "fsm::dead-transition");
}

#[test]
fn permanent_classes_without_a_catch_are_a_warning() {
    let partial = workflow(
        r#"catch = [{ on = ["auth", "not_found"], next = "FAILED" }]"#,
        "",
    );
    let (m, d) = compile(&partial);
    assert!(m.is_some());
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(
        (d[0].code.as_str(), d[0].severity),
        ("fsm::uncaught-permanent", Severity::Warning)
    );
    assert!(
        d[0].message
            .contains("no catch for bad_invocation, budget_exceeded"),
        "{}",
        d[0].message
    );
    let help = d[0].help.clone().unwrap_or_default();
    assert!(
        help.contains(r#"on = ["bad_invocation", "budget_exceeded"], next = "FAILED""#),
        "{help}"
    );
    // A lifecycle's `self` state is not judged.
    let lifecycle = workflow("", "").replace("agent = \"worker\"", "agent = \"self\"");
    assert!(compile(&lifecycle).1.is_empty());
}

#[test]
fn the_worst_case_counts_retries_and_wall_time() {
    // A loop WORK —bad→ WORK at most twice: three visits of 1 + 3 attempts.
    let text = workflow(&format!("{RETRY}\n{CATCH}\ntimeout_secs = 100"), "").replace(
        "event = \"bad\"\nto = \"FAILED\"",
        "event = \"bad\"\nto = \"WORK\"\nmax = 2\nexhausted = \"FAILED\"",
    );
    let m = clean(&text);
    let id = m.state_id("WORK").expect("WORK");
    let w = m.worst_case();
    assert_eq!((w.transitions, w.invocations), (4, 12));
    assert_eq!(m.worst_invocations(id), Some(12));
    // Per visit: 4 × 100 s plus 2 + 6 + 10 s of waits; three visits.
    let wall = m.worst_wall_time_with_default(900);
    assert_eq!(wall.total, Duration::from_secs(3 * (400 + 18)));
    assert!(wall.exact && !wall.human_waits);
    // The caller's timeouts win over the file's.
    let wall = m.worst_wall_time(|_, _| Duration::from_secs(10));
    assert_eq!(wall.total, Duration::from_secs(3 * (40 + 18)));
    // Gates: their waits are not counted, and say so.
    let gated = clean(&gated());
    let wall = gated.worst_wall_time_with_default(60);
    assert!(wall.human_waits);
    assert_eq!(wall.total, Duration::from_secs(3 * 60));
}

#[test]
fn shipped_workflows_have_retries_and_no_warnings() {
    let (cat, diags) = super::Catalog::load(None, &CompileOptions::default());
    assert!(diags.is_empty(), "{:?}", diags.items());
    let pet = cat.get("plan_execute_test").expect("shipped");
    assert_eq!(pet.worst_case().invocations, 55);
    assert_eq!(
        pet.worst_wall_time_with_default(super::DEFAULT_TIMEOUT_SECS)
            .total,
        Duration::from_secs(11 * (5 * 900 + 75))
    );
    for name in ["EXECUTING", "TESTING"] {
        let id = pet.state_id(name).expect("state");
        assert!(pet.has_transition(id, super::NO_PROGRESS), "{name}");
    }
    let looper = cat.get("looper").expect("shipped");
    let w = looper.worst_case();
    assert_eq!((w.transitions, w.invocations), (18, 85));
    let visits = |n: &str| looper.bound_for_visits(looper.state_id(n).expect("state"));
    assert_eq!(
        (visits("CODING"), visits("REVIEWING"), visits("JUDGING")),
        (Some(7), Some(5), Some(5))
    );
}
