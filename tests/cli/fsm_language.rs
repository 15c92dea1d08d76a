//! The workflow language through the binary: `retry` and `catch`, human
//! gates, the input state's place, project output schemas, the shipped
//! workflows (the Looper included) and their worst case.

use crate::util::{Sandbox, output_text};

/// An agent state WORK between INIT and DONE/FAILED; `extra` goes into WORK,
/// `more` at the end of the file.
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
agent = "executor"
output = "execution_result"
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

const CATCH: &str = r#"catch = [{ on = ["auth", "not_found", "bad_invocation", "budget_exceeded"], next = "FAILED" }]"#;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(sb: &Sandbox, args: &[&str]) -> Run {
    let out = sb.modix().args(args).output().expect("run modix");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A project holding only `.modix/fsm/w.toml`.
fn fsm_project(text: &str) -> Sandbox {
    let sb = Sandbox::new();
    sb.write(".modix/fsm/w.toml", text);
    sb
}

/// `fsm check` refuses `text`: its headline for `code` names `line:column`
/// and says each of `said` (message or help).
fn refused(text: &str, code: &str, at: &str, said: &[&str]) {
    let r = run(&fsm_project(text), &["fsm", "check"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let headline = format!(".modix/fsm/w.toml:{at}: error[{code}]");
    assert!(
        r.stderr.contains(&headline),
        "no {headline} in:\n{}",
        r.stderr
    );
    for s in said {
        assert!(r.stderr.contains(s), "no {s:?} in:\n{}", r.stderr);
    }
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn unknown_failure_classes_get_suggestions() {
    let text = workflow(
        r#"retry = [{ on = ["rate_limit", "netwrok"], max_attempts = 2 }]"#,
        "",
    );
    refused(
        &text,
        "fsm::unknown-class",
        "19:18",
        &[
            "unknown failure class `rate_limit`",
            "did you mean `rate_limited`?",
        ],
    );
    refused(
        &text,
        "fsm::unknown-class",
        "19:32",
        &["did you mean `network`?"],
    );
}

#[test]
fn a_retry_without_a_bound_is_refused() {
    let text = workflow(r#"retry = [{ on = ["network"], interval_secs = 5 }]"#, "");
    refused(
        &text,
        "fsm::unbounded-retry",
        "19:10",
        &["has no `max_attempts`", "1 to 10"],
    );
    let text = workflow(r#"retry = [{ on = ["network"], max_attempts = 50 }]"#, "");
    refused(
        &text,
        "fsm::unbounded-retry",
        "19:45",
        &["more than 10 retries"],
    );
}

#[test]
fn a_catch_to_an_unknown_state_is_refused() {
    let text = workflow(r#"catch = [{ on = ["auth"], next = "FIALED" }]"#, "");
    refused(
        &text,
        "fsm::unknown-state",
        "19:34",
        &["goes to unknown state `FIALED`", "did you mean `FAILED`?"],
    );
}

#[test]
fn an_input_state_mid_workflow_is_refused() {
    let text = workflow(
        CATCH,
        "\n[states.WAIT]\nkind = \"input\"\nevent = \"resume\"\n",
    )
    .replace(
        "event = \"ok\"\nto = \"DONE\"",
        "event = \"ok\"\nto = \"WAIT\"",
    ) + "\n[[transitions]]\nfrom = \"WAIT\"\nevent = \"resume\"\nto = \"DONE\"\n";
    refused(
        &text,
        "fsm::input-not-initial",
        "44:9",
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
"#;

#[test]
fn a_gate_event_without_a_transition_is_refused() {
    let text = workflow(CATCH, GATE).replace(
        "event = \"ok\"\nto = \"DONE\"",
        "event = \"ok\"\nto = \"APPROVE\"",
    );
    refused(
        &text,
        "fsm::unhandled-event",
        "47:23",
        &["state `APPROVE` can emit event `rejected`"],
    );
}

#[test]
fn a_gate_is_shown_checked_and_drawn() {
    let more = format!(
        "{GATE}\n[[transitions]]\nfrom = \"APPROVE\"\nevent = \"rejected\"\nto = \"WORK\"\nmax = 2\nexhausted = \"FAILED\"\n"
    );
    let text = workflow(CATCH, &more).replace(
        "event = \"ok\"\nto = \"DONE\"",
        "event = \"ok\"\nto = \"APPROVE\"",
    );
    let sb = fsm_project(&text);
    let r = run(&sb, &["fsm", "check", "w"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    assert!(r.stdout.contains("w 1.0.0: ok — worst case exactly 7 transitions; agent invocations at most: WORK 3; human gates at most: APPROVE 3; wall time at most 45m 00s plus human waits"), "{}", r.stdout);
    let r = run(&sb, &["fsm", "show", "w"]);
    assert!(
        r.stdout
            .contains("APPROVE\thuman\tShip it? → approved | rejected"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("WORK\tauth, not_found, bad_invocation, budget_exceeded\tcatch → FAILED"),
        "{}",
        r.stdout
    );
    let r = run(&sb, &["fsm", "show", "w", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
    let gate = &v["states"][4];
    assert_eq!(
        (&gate["name"], &gate["kind"]),
        (&"APPROVE".into(), &"human".into())
    );
    assert_eq!(gate["events"], serde_json::json!(["approved", "rejected"]));
    let caught: Vec<&serde_json::Value> = v["transitions"]
        .as_array()
        .expect("array")
        .iter()
        .filter(|t| !t["caught"].is_null())
        .collect();
    assert_eq!(caught.len(), 4);
    assert_eq!(caught[0]["event"], "catch:auth");
    let r = run(&sb, &["fsm", "graph", "w"]);
    assert!(
        r.stdout.contains("{{\"APPROVE<br/>human\"}}"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("-.->|\"catch: auth, not_found, bad_invocation, budget_exceeded\"|"),
        "{}",
        r.stdout
    );
}

#[test]
fn permanent_failures_without_a_catch_are_a_warning() {
    let r = run(&fsm_project(&workflow("", "")), &["fsm", "check"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains(".modix/fsm/w.toml:9:9: warning[fsm::uncaught-permanent]: agent state `WORK` has no catch for auth, not_found, bad_invocation, budget_exceeded"), "{}", r.stderr);
    assert!(r.stderr.contains(r#"next = "FAILED""#), "{}", r.stderr);
}

#[test]
fn retries_count_in_the_worst_case() {
    let extra = format!(
        "{CATCH}\ntimeout_secs = 60\nretry = [{{ on = [\"overloaded\"], max_attempts = 2, interval_secs = 10, backoff_rate = 3 }}]"
    );
    let r = run(
        &fsm_project(&workflow(&extra, "")),
        &["fsm", "check", "--json", "w"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
    let w = &v["machines"][0]["worst_case"];
    assert_eq!(w["agent_invocations"]["WORK"], 1);
    assert_eq!(w["agent_invocations_with_retries"]["WORK"], 3);
    assert_eq!(w["invocations_with_retries"], 3);
    // Three attempts of 60 s and waits of 10 s and 30 s.
    assert_eq!(w["wall_time"]["secs"], 3 * 60 + 10 + 30);
    assert_eq!(w["wall_time"]["exact"], true);
}

#[test]
fn the_shipped_workflows_check_clean() {
    let sb = Sandbox::new();
    let r = run(&sb, &["fsm", "check"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.is_empty(), "no warnings expected:\n{}", r.stderr);
    assert!(r.stdout.contains(
        "plan_execute_test 1.0.0: ok — worst case exactly 12 transitions; agent invocations at most: PLANNING 1, EXECUTING 6, TESTING 4; with retries at most 55 invocations (PLANNING 5, EXECUTING 30, TESTING 20); wall time at most 13h 58m"
    ), "{}", r.stdout);
}

#[test]
fn the_looper_worst_case() {
    let sb = Sandbox::new();
    let r = run(&sb, &["fsm", "check", "looper"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains(
        "looper 1.0.0: ok — worst case exactly 18 transitions; agent invocations at most: CODING 7, REVIEWING 5, JUDGING 5; with retries at most 85 invocations (CODING 35, REVIEWING 25, JUDGING 25); wall time at most 21h 36m"
    ), "{}", r.stdout);
    let r = run(&sb, &["fsm", "check", "--json", "looper"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
    // 17 agent visits of 5 × 900 s plus 5 + 10 + 20 + 40 s of waits.
    assert_eq!(
        v["machines"][0]["worst_case"]["wall_time"]["secs"],
        17 * (5 * 900 + 75)
    );
    let r = run(&sb, &["fsm", "show", "looper"]);
    assert!(
        r.stdout
            .contains("JUDGING\tcontinue\tCODING\t4\tOUT_OF_ROUNDS"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("CODING\tno_progress\tFAILED"),
        "{}",
        r.stdout
    );
}

/// `validate` on an initialized project; its exit code and all it printed.
fn validate(sb: &Sandbox) -> (i32, String) {
    let out = sb.modix().arg("validate").output().expect("run");
    (out.status.code().unwrap_or(-1), output_text(&out))
}

const PLAN_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["steps"],
  "properties": {
    "steps": { "type": "array", "items": { "type": "string" } },
    "risk": { "enum": ["low", "high"] }
  },
  "additionalProperties": false
}
"#;

#[test]
fn a_user_schema_that_is_not_a_schema_is_reported_with_its_line() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/schemas/plan.schema.json",
        "{\n  \"type\": \"object\",\n  \"required\": \"steps\"\n}\n",
    );
    sb.write(".modix/schemas/test_result.schema.json", "{}\n");
    let (code, text) = validate(&sb);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains(".modix/schemas/plan.schema.json:3:15: error[schema::invalid]"),
        "{text}"
    );
    assert!(text.contains("error[schema::reserved-id]: output schema `test_result` has the id of a schema modix ships"), "{text}");
    assert!(!text.contains("panicked"), "{text}");
}

#[test]
fn emit_rules_and_manifests_use_the_projects_schemas() {
    let sb = Sandbox::initialized();
    sb.write(".modix/schemas/plan.schema.json", PLAN_SCHEMA);
    let state = r#"
[states.PLAN]
kind = "agent"
agent = "planner2"
output = "plan"
emit = [
  { on = "output", when = 'riks == "high"', event = "bad" },
  { on = "output", event = "ok2" },
  { on = "invalid_output", event = "bad" },
  { on = "process_error", event = "bad" },
  { on = "timeout", event = "bad" },
]
catch = [{ on = ["auth", "not_found", "bad_invocation", "budget_exceeded"], next = "FAILED" }]

[[transitions]]
from = "PLAN"
event = "ok2"
to = "DONE"

[[transitions]]
from = "PLAN"
event = "bad"
to = "FAILED"
"#;
    let text = workflow(CATCH, state).replace(
        "event = \"ok\"\nto = \"DONE\"",
        "event = \"ok\"\nto = \"PLAN\"",
    );
    sb.write(".modix/fsm/w.toml", &text);
    sb.edit_json(".modix/agents.json", |v| {
        let mut agent = v["agents"]["planner"].clone();
        agent["role"] = "planner2".into();
        agent["manifest"]["output_schema"] = "plan".into();
        v["agents"]["planner2"] = agent;
    });
    let (code, text) = validate(&sb);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains(".modix/fsm/w.toml:49:27: error[fsm::unknown-field]: field `riks` does not exist: plan output has no field `riks`"), "{text}");
    assert!(text.contains("did you mean `risk`?"), "{text}");
    // The same check through `fsm check`, which reads the project's schemas too.
    let r = run(&sb, &["fsm", "check", "w"]);
    assert!(
        r.stderr.contains("error[fsm::unknown-field]"),
        "{}",
        r.stderr
    );
    // Fixed, the project is valid: the manifest's `output_schema = "plan"` is known.
    sb.write(
        ".modix/fsm/w.toml",
        &sb.read(".modix/fsm/w.toml").replace("riks", "risk"),
    );
    let (code, text) = validate(&sb);
    assert_eq!(code, 0, "{text}");
    // A manifest naming an unknown schema is offered the project's own.
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["planner2"]["manifest"]["output_schema"] = "plans".into();
    });
    let (code, text) = validate(&sb);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("unknown output schema `plans`") && text.contains("did you mean `plan`?"),
        "{text}"
    );
}

#[test]
fn a_broken_user_schema_is_reported_once() {
    let sb = Sandbox::initialized();
    sb.write(".modix/schemas/plan.schema.json", "{ \"type\": }\n");
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["planner"]["manifest"]["output_schema"] = "plan".into();
    });
    let (code, text) = validate(&sb);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains(".modix/schemas/plan.schema.json:1:11: error[config::syntax]"),
        "{text}"
    );
    assert!(!text.contains("unknown output schema"), "{text}");
}
