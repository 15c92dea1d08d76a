//! People in the loop and in control of a running run, through the binary:
//! gates answered from another process, a failed run redriven with a note,
//! stop (at the boundary and now), pending messages delivered once, status,
//! feedback that reaches the agent that must act on it, the Looper, fork.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::scenarios::EXECUTOR_OK;
use crate::util::{GoResult, Sandbox, output_text};

/// The shipped workflow with a plan-approval gate between planning and
/// executing, as the project's `gated` workflow.
fn gated(sb: &Sandbox) {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fsm/plan_execute_test.toml"),
    )
    .unwrap();
    let old =
        "[[transitions]]\nfrom = \"PLANNING\"\nevent = \"task_spec_valid\"\nto = \"EXECUTING\"";
    assert!(shipped.contains(old));
    let text = shipped
        .replace("id = \"plan_execute_test\"", "id = \"gated\"")
        .replace(
            old,
            "[[transitions]]\nfrom = \"PLANNING\"\nevent = \"task_spec_valid\"\nto = \"APPROVE_PLAN\"\n\n\
             [[transitions]]\nfrom = \"APPROVE_PLAN\"\nevent = \"approved\"\nto = \"EXECUTING\"\n\n\
             [[transitions]]\nfrom = \"APPROVE_PLAN\"\nevent = \"rejected\"\nto = \"PLANNING\"\nmax = 2\nexhausted = \"FAILED\"",
        )
        .replace(
            "[states.DONE]",
            "[states.APPROVE_PLAN]\nkind = \"human\"\nquestion = \"Approve the plan?\"\nevents = [\"approved\", \"rejected\"]\n\n[states.DONE]",
        );
    sb.write(".modix/fsm/gated.toml", &text);
    sb.edit_json(".modix/projects.json", |v| v["workflow"] = "gated".into());
}

fn json_run(sb: &Sandbox, args: &[&str]) -> GoResult {
    GoResult::parse(&sb.modix().args(args).output().unwrap())
}

fn prompt_of(sb: &Sandbox, run: &str, n: u32) -> String {
    sb.invocation(run, n)["prompt"].as_str().unwrap().to_owned()
}

#[test]
fn a_gate_waits_and_is_approved_from_another_process_with_a_note() {
    let sb = Sandbox::example();
    gated(&sb);
    let r = sb.go_json("Fix mean()");
    assert_eq!(
        r.code,
        Some(4),
        "waiting has its own exit code: {}",
        r.stderr
    );
    assert_eq!(r.summary["status"], "waiting");
    assert_eq!(r.summary["reason"], "Approve the plan?");
    assert_eq!(
        r.path().last().unwrap(),
        "PLANNING -task_spec_valid-> APPROVE_PLAN"
    );
    let run = r.run_id();
    // Nobody drives it; status shows the gate and the plan.
    let out = sb
        .modix()
        .args(["status", &run, "--json"])
        .output()
        .unwrap();
    let view: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(view["status"], "waiting");
    assert_eq!(view["question"], "Approve the plan?");
    assert_eq!(view["outputs"][0][0], "PLANNING");
    assert!(view["owner_pid"].is_null());
    let out = sb.modix().args(["status"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("Waiting for you: Approve the plan?"));
    // Answered from another process: the run goes on to DONE.
    let r = json_run(
        &sb,
        &[
            "approve",
            &run[..10],
            "--note",
            "keep the public API",
            "--json",
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let gate = &r.transitions[0];
    assert_eq!(gate["event"], "approved");
    let reason = gate["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("approved by ") && reason.ends_with(": keep the public API"),
        "{reason}"
    );
    assert_eq!(r.transitions.last().unwrap()["to"], "DONE");
    // The note reached the executor's context and prompt.
    let inv = sb.invocation(&run, 2);
    assert_eq!(inv["state"], "EXECUTING");
    assert_eq!(inv["context"]["notes"][0]["note"], "keep the public API");
    assert!(prompt_of(&sb, &run, 2).contains("keep the public API"));
    // A run that does not wait cannot be approved.
    let out = sb.modix().args(["approve", &run]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(output_text(&out).contains("is not waiting at a gate"));
}

#[test]
fn a_rejection_sends_the_work_back_with_the_note_and_answers_are_checked() {
    let sb = Sandbox::example();
    gated(&sb);
    let r = sb.go_json("Fix mean()");
    let run = r.run_id();
    let out = sb.modix().args(["reject", &run]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "--note is required: {}",
        output_text(&out)
    );
    let out = sb.modix().args(["answer", &run, "maybe"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        output_text(&out).contains("gate APPROVE_PLAN takes approved, rejected"),
        "{}",
        output_text(&out)
    );
    let r = json_run(
        &sb,
        &[
            "reject",
            &run,
            "--note",
            "split it into two tasks",
            "--json",
        ],
    );
    assert_eq!(
        r.code,
        Some(4),
        "back at the gate after planning again: {}",
        r.stderr
    );
    assert_eq!(
        r.path(),
        [
            "APPROVE_PLAN -rejected-> PLANNING",
            "PLANNING -task_spec_valid-> APPROVE_PLAN"
        ]
    );
    // The planner was told why, as the step that sent it back said it.
    let prompt = prompt_of(&sb, &run, 2);
    assert!(
        prompt.contains("Your previous answer was rejected:\nsplit it into two tasks"),
        "{prompt}"
    );
    // `answer` takes any of the gate's events; --later records it and stops.
    let r = json_run(&sb, &["answer", &run, "approved", "--later", "--json"]);
    assert_eq!(r.code, Some(130), "{}", r.stderr);
    assert_eq!(r.summary["status"], "stopped");
    assert_eq!(r.path(), ["APPROVE_PLAN -approved-> EXECUTING"]);
    let r = json_run(&sb, &["resume", &run, "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.transitions.last().unwrap()["to"], "DONE");
}

#[test]
fn a_failed_run_is_redriven_from_a_state_with_a_note_its_agent_sees() {
    let sb = Sandbox::example();
    // The tester fails until the marker exists (outside the workspace).
    let marker = sb.dir.path().join("fixed");
    let tester = sb.root().join("agents/tester");
    crate::util::write_file(
        &tester,
        &format!(
            "#!/bin/sh\n[ -e {} ] && exit 0\necho 'FAIL: test_mean'\nexit 1\n",
            marker.display()
        ),
    );
    crate::util::make_executable(&tester);
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["agents/tester"])
    });
    crate::scenarios::agent(&sb, EXECUTOR_OK);
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let run = r.run_id();
    assert_eq!(r.summary["state"], "FAILED");
    let out = sb
        .modix()
        .args(["resume", &run, "--from", "DONE"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    std::fs::write(&marker, "").unwrap();
    let r = json_run(
        &sb,
        &[
            "resume",
            &run,
            "--from",
            "EXECUTING",
            "--note",
            "the divisor is off by one",
            "--json",
        ],
    );
    assert_eq!(r.code, Some(0), "{:?} {}", r.path(), r.stderr);
    let redrive = &r.transitions[0];
    assert_eq!(
        (
            redrive["from"].as_str(),
            redrive["event"].as_str(),
            redrive["to"].as_str()
        ),
        (Some("FAILED"), Some("redrive"), Some("EXECUTING"))
    );
    assert!(
        redrive["reason"]
            .as_str()
            .unwrap()
            .ends_with(": the divisor is off by one")
    );
    // Loop bounds start afresh: the redriven executor is on attempt 1.
    assert_eq!(r.transitions[1]["attempt"], 1);
    assert_eq!(r.transitions.last().unwrap()["to"], "DONE");
    let history = sb
        .modix()
        .args(["history", &run, "--json"])
        .output()
        .unwrap();
    let history: Value = serde_json::from_slice(&history.stdout).unwrap();
    let n = r.transitions[1]["invocation"].as_u64().unwrap() as u32;
    let ctx = &sb.invocation(&run, n)["context"];
    assert_eq!(
        ctx["notes"][0]["note"], "the divisor is off by one",
        "{ctx}"
    );
    assert!(history["transitions"].as_array().unwrap().len() > r.transitions.len());
    // A success is not redriven; an interrupted run takes no --note.
    let out = sb
        .modix()
        .args(["resume", &run, "--note", "again"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
}

/// An executor that touches `marker`, then (the first time) sleeps `secs`.
fn slow_executor(sb: &Sandbox, marker: &Path, secs: u32) {
    crate::scenarios::agent(
        sb,
        &format!(
            "    if [ ! -e {m} ]; then touch {m}; sleep {secs}; fi\n{EXECUTOR_OK}\n",
            m = marker.display()
        ),
    );
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["true"])
    });
}

#[test]
fn stop_from_another_process_takes_effect_at_the_step_boundary() {
    let sb = Sandbox::example();
    let marker = sb.dir.path().join("executing");
    slow_executor(&sb, &marker, 3);
    let child = sb.spawn(&["go", "--json", "Fix mean()"]);
    crate::scenarios::wait_for(&marker);
    let asked = Instant::now();
    let out = sb.modix().args(["stop", "last"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "acknowledged in {:?}",
        asked.elapsed()
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("acknowledged the stop"));
    let out = child.wait_with_output().unwrap();
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(130), "{}", r.stderr);
    assert_eq!(r.summary["status"], "stopped");
    // The executor's step finished and was recorded; nothing after it.
    assert_eq!(
        r.path().last().unwrap(),
        "EXECUTING -execution_done-> TESTING"
    );
    let run = r.run_id();
    assert_eq!(sb.runs()[0]["status"], "stopped");
    let r = json_run(&sb, &["resume", "--json"]);
    assert_eq!(
        r.code,
        Some(0),
        "resume without RUN takes the stopped run: {}",
        r.stderr
    );
    assert_eq!(r.run_id(), run);
    assert_eq!(r.transitions.last().unwrap()["to"], "DONE");
}

#[test]
fn stop_now_kills_the_running_agent_and_resume_runs_it_again() {
    let sb = Sandbox::example();
    let marker = sb.dir.path().join("executing");
    slow_executor(&sb, &marker, 60);
    let child = sb.spawn(&["go", "--json", "Fix mean()"]);
    crate::scenarios::wait_for(&marker);
    let asked = Instant::now();
    let out = sb.modix().args(["stop", "last", "--now"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let out = child.wait_with_output().unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "stopped in {:?}",
        asked.elapsed()
    );
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(130), "{}", r.stderr);
    assert_eq!(r.summary["status"], "stopped");
    let run = r.run_id();
    assert_eq!(sb.invocation(&run, 2)["status"], "abandoned");
    let r = json_run(&sb, &["resume", &run, "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.transitions.last().unwrap()["to"], "DONE");
    // Stopping a run that ended is refused; one not running is a no-op.
    let out = sb.modix().args(["stop", &run]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
}

#[test]
fn a_stop_the_run_ends_before_taking_is_withdrawn_and_says_so() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let sb = Sandbox::example();
    let marker = sb.dir.path().join("executing");
    slow_executor(&sb, &marker, 60);
    let mut child = sb.spawn(&["go", "--json", "Fix mean()"]);
    crate::scenarios::wait_for(&marker);
    // The run's process is frozen (alive, so `stop` asks and waits), then
    // dies before it takes the request.
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    let stop = sb.spawn(&["stop", "last"]);
    std::thread::sleep(Duration::from_millis(1500));
    kill(pid, Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    let out = crate::scenarios::finished_within(stop, "stop");
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("ended before it took the stop (interrupted (owner gone))")
            && !text.contains("may be stuck"),
        "{text}"
    );
    // Withdrawn: a resume is not stopped by it.
    let r = json_run(&sb, &["resume", "last", "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

#[test]
fn a_pending_message_reaches_the_next_agent_exactly_once() {
    let sb = Sandbox::example();
    gated(&sb);
    crate::scenarios::agent(&sb, EXECUTOR_OK);
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["false"])
    });
    sb.edit_json(".modix/runtimes.json", |v| {
        v["loops"]["no_progress_after"] = 10.into()
    });
    let r = sb.go_json("Fix mean()");
    let run = r.run_id();
    let out = sb
        .modix()
        .args(["pending", "add", &run, "also handle an empty list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let r = json_run(&sb, &["approve", &run, "--json"]);
    assert_eq!(r.code, Some(1), "the tester never passes: {}", r.stderr);
    // The first executor got it; the tester and the later executors did not.
    let executors: Vec<Value> = (2..)
        .map_while(|n| {
            let out = sb
                .modix()
                .args(["history", &run, "--invocation", &n.to_string(), "--json"])
                .output()
                .unwrap();
            serde_json::from_slice::<Value>(&out.stdout)
                .ok()
                .filter(|v| v.get("state").is_some())
        })
        .collect();
    let got: Vec<(String, usize)> = executors
        .iter()
        .map(|i| {
            (
                i["state"].as_str().unwrap().to_owned(),
                i["context"]["pending"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    assert_eq!(got[0], ("EXECUTING".to_owned(), 1), "{got:?}");
    assert!(got[1..].iter().all(|(_, n)| *n == 0), "{got:?}");
    assert_eq!(
        executors[0]["context"]["pending"][0]["text"],
        "also handle an empty list"
    );
    assert!(prompt_of(&sb, &run, 2).contains("- also handle an empty list"));
    let out = sb
        .modix()
        .args(["pending", "list", &run, "--json"])
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["pending"][0]["taken_seq"], r.transitions[1]["seq"]);
    let out = sb
        .modix()
        .args(["pending", "add", &run, "late"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "the run ended: {}",
        output_text(&out)
    );
}

/// A workflow with a reviewer whose custom schema's blockers send the work
/// back to the executor.
fn reviewed(sb: &Sandbox) {
    sb.write(
        ".modix/schemas/code_review.schema.json",
        r#"{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "required": ["approved", "blockers"], "additionalProperties": false,
            "properties": {"approved": {"type": "boolean"},
                           "blockers": {"type": "array", "items": {"type": "string"}}}}"#,
    );
    sb.write(
        ".modix/fsm/reviewed.toml",
        r#"id = "reviewed"
version = "1.0.0"
initial = "INIT"

[states.INIT]
kind = "input"
event = "go"

[states.PLANNING]
kind = "agent"
agent = "planner"
output = "task_spec"
emit = [{ on = "output", event = "planned" }, { on = "invalid_output", event = "broken" },
        { on = "process_error", event = "broken" }, { on = "timeout", event = "broken" }]

[states.EXECUTING]
kind = "agent"
agent = "executor"
output = "execution_result"
emit = [{ on = "output", event = "done" }, { on = "invalid_output", event = "broken" },
        { on = "process_error", event = "broken" }, { on = "timeout", event = "broken" }]

[states.REVIEWING]
kind = "agent"
agent = "reviewer"
output = "code_review"
emit = [{ on = "output", when = "approved == true", event = "approved" },
        { on = "output", event = "changes_requested" }, { on = "invalid_output", event = "broken" },
        { on = "process_error", event = "broken" }, { on = "timeout", event = "broken" }]

[states.DONE]
kind = "terminal"
outcome = "success"

[states.FAILED]
kind = "terminal"
outcome = "failure"

[[transitions]]
from = "INIT"
event = "go"
to = "PLANNING"

[[transitions]]
from = "PLANNING"
event = "planned"
to = "EXECUTING"

[[transitions]]
from = "PLANNING"
event = "broken"
to = "FAILED"

[[transitions]]
from = "EXECUTING"
event = "done"
to = "REVIEWING"

[[transitions]]
from = "EXECUTING"
event = "broken"
to = "FAILED"

[[transitions]]
from = "EXECUTING"
event = "no_progress"
to = "FAILED"

[[transitions]]
from = "REVIEWING"
event = "approved"
to = "DONE"

[[transitions]]
from = "REVIEWING"
event = "changes_requested"
to = "EXECUTING"
max = 2
exhausted = "FAILED"

[[transitions]]
from = "REVIEWING"
event = "broken"
to = "FAILED"
"#,
    );
    sb.edit_json(".modix/projects.json", |v| {
        v["workflow"] = "reviewed".into()
    });
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["reviewer"] = serde_json::json!({
            "role": "reviewer", "shell": "scripted", "brain": "scripted",
            "manifest": { "output_schema": "code_review", "context": "isolated",
                          "permissions": { "write_files": false } }
        });
    });
}

#[test]
fn a_reviewers_blockers_reach_the_executors_next_prompt() {
    let sb = Sandbox::example();
    reviewed(&sb);
    crate::scenarios::agent(
        &sb,
        &format!(
            r#"    if [ "$MODIX_STATE" = REVIEWING ]; then
      if [ "$MODIX_ATTEMPT" = 1 ]; then echo '{{"approved": false, "blockers": ["mean() of one value is wrong"]}}';
      else echo '{{"approved": true, "blockers": []}}'; fi
      exit 0
    fi
{EXECUTOR_OK}"#
        ),
    );
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(
        r.path()[3..],
        [
            "REVIEWING -changes_requested-> EXECUTING",
            "EXECUTING -done-> REVIEWING",
            "REVIEWING -approved-> DONE"
        ]
    );
    let run = r.run_id();
    let second = sb.invocation(&run, 4);
    assert_eq!(
        (second["state"].as_str(), second["attempt"].as_u64()),
        (Some("EXECUTING"), Some(2))
    );
    let feedback = second["context"]["feedback"].as_str().unwrap();
    assert!(
        feedback.contains("REVIEWING sent the work back (changes_requested)"),
        "{feedback}"
    );
    assert!(
        feedback.contains("mean() of one value is wrong"),
        "{feedback}"
    );
    assert_eq!(second["context"]["came_from"]["state"], "REVIEWING");
    assert_eq!(
        second["context"]["outputs"]["REVIEWING"]["output"]["blockers"][0],
        "mean() of one value is wrong"
    );
    assert!(prompt_of(&sb, &run, 4).contains("mean() of one value is wrong"));
}

/// The Looper with scripted coder, reviewer and judge agents.
fn looper(sb: &Sandbox, judge: &str) {
    sb.edit_json(".modix/projects.json", |v| v["workflow"] = "looper".into());
    sb.edit_json(".modix/agents.json", |v| {
        for (id, schema) in [("reviewer", "review_result"), ("judge", "judge_decision")] {
            v["agents"][id] = serde_json::json!({
                "role": id, "shell": "scripted", "brain": "scripted",
                "manifest": { "output_schema": schema, "context": "isolated",
                              "permissions": { "write_files": false } }
            });
        }
    });
    crate::scenarios::agent(
        sb,
        &format!(
            r#"    case "$MODIX_STATE" in
      REVIEWING) echo '{{"approved": true, "blockers": []}}'; exit 0 ;;
      JUDGING) {judge}; exit 0 ;;
    esac
{EXECUTOR_OK}"#
        ),
    );
}

#[test]
fn the_looper_hands_the_judges_next_task_to_the_coder_and_ends_on_terminate() {
    let sb = Sandbox::example();
    looper(
        &sb,
        r#"if [ "$MODIX_ATTEMPT" = 1 ]; then echo '{"decision": "continue", "next_task": "add a docstring", "reason": "more to do"}'; else echo '{"decision": "terminate", "reason": "done"}'; fi"#,
    );
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.path().last().unwrap(), "JUDGING -terminate-> DONE");
    let run = r.run_id();
    let coder2 = sb.invocation(&run, 4);
    assert_eq!(coder2["state"], "CODING");
    assert_eq!(coder2["context"]["next_task"], "add a docstring");
    assert!(sb.invocation(&run, 1)["context"]["next_task"].is_null());
}

/// Every package an agent reads is the package the record keeps, written as
/// pretty JSON in its own order — also at later steps, which quote earlier
/// outputs, the plan and the step that sent the work back from texts the
/// run made once (Python's `json.dumps(indent=2)` writes the same text).
#[test]
fn every_package_an_agent_reads_is_the_recorded_one_as_pretty_json() {
    let sb = Sandbox::example();
    let seen = sb.dir.path().join("seen");
    std::fs::create_dir(&seen).unwrap();
    looper(&sb, "");
    crate::scenarios::agent(
        &sb,
        &format!(
            r#"    cp "$MODIX_CONTEXT" "{seen}/$MODIX_STATE-$MODIX_ATTEMPT.json"
    case "$MODIX_STATE" in
      REVIEWING) echo '{{"approved": true, "blockers": [], "suggestions": ["ünïcode \\"quoted\\"", "a\\nb"], "scores": {{}}}}'; exit 0 ;;
      JUDGING) if [ "$MODIX_ATTEMPT" -lt 3 ]; then echo '{{"decision": "continue", "next_task": "more", "reason": "again"}}'; else echo '{{"decision": "terminate", "reason": "done"}}'; fi; exit 0 ;;
    esac
{EXECUTOR_OK}"#,
            seen = seen.display()
        ),
    );
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{:?} {}", r.path(), r.summary);
    let run = r.run_id();
    // Every transition but the first (the epic's) is an agent's.
    let invocations = r.path().len() as u32 - 1;
    let mut checked = 0;
    for n in 1..=invocations {
        let inv = sb.invocation(&run, n);
        let (Some(state), Some(attempt)) = (inv["state"].as_str(), inv["attempt"].as_u64()) else {
            continue;
        };
        let path = seen.join(format!("{state}-{attempt}.json"));
        let text = std::fs::read_to_string(&path).unwrap();
        let read: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(read, inv["context"], "{}", path.display());
        let canonical = std::process::Command::new("python3")
            .args([
                "-c",
                "import json,sys; t=open(sys.argv[1]).read(); \
                 print(t == json.dumps(json.loads(t), indent=2, ensure_ascii=False) + '\\n')",
            ])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&canonical.stdout).trim(),
            "True",
            "{}:\n{text}",
            path.display()
        );
        checked += 1;
    }
    assert!(checked >= 9, "{checked} packages checked");
    let last = std::fs::read_to_string(seen.join("CODING-3.json")).unwrap();
    assert!(last.contains("ünïcode"), "{last}");
    // The judge's output the coder's feedback quotes is stored once: the
    // record keeps the feedback's first line, and reads it back whole.
    let read: Value = serde_json::from_str(&last).unwrap();
    let feedback = read["feedback"].as_str().unwrap();
    let judged = serde_json::to_string_pretty(&read["came_from"]["output"]).unwrap();
    assert!(feedback.ends_with(&format!("\n{judged}")), "{feedback}");
    let db = sb.root().join(".modix/modix.db");
    let conn =
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let quoting: i64 = conn
        .query_row(
            "SELECT count(*) FROM invocations \
             WHERE json_type(context_now, '$.feedback.quoting_came_from_output') = 'text'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        quoting >= 2,
        "{quoting} feedbacks stored by their first line"
    );
}

#[test]
fn the_looper_stops_at_its_bound_and_its_judge_gets_pending_messages() {
    let sb = Sandbox::example();
    looper(
        &sb,
        r#"echo '{"decision": "continue", "next_task": "more", "reason": "never satisfied"}'"#,
    );
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.summary["state"], "OUT_OF_ROUNDS");
    let judged = r
        .path()
        .iter()
        .filter(|p| p.starts_with("JUDGING -continue"))
        .count();
    assert_eq!(judged, 5, "{:?}", r.path());

    // A message queued while the run works goes to the judge, not the coder.
    let sb = Sandbox::example();
    let marker = sb.dir.path().join("go-on");
    looper(&sb, r#"echo '{"decision": "terminate", "reason": "done"}'"#);
    crate::scenarios::agent(
        &sb,
        &format!(
            r#"    case "$MODIX_STATE" in
      REVIEWING) echo '{{"approved": true, "blockers": []}}'; exit 0 ;;
      JUDGING) echo '{{"decision": "terminate", "reason": "done"}}'; exit 0 ;;
    esac
    while [ ! -e {m} ]; do sleep 0.05; done
{EXECUTOR_OK}"#,
            m = marker.display()
        ),
    );
    let child = sb.spawn(&["go", "--json", "Fix mean()"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let run = loop {
        assert!(Instant::now() < deadline, "no run");
        std::thread::sleep(Duration::from_millis(50));
        if !sb.root().join(".modix/modix.db").exists() {
            continue;
        }
        if let Some(id) = sb
            .runs()
            .as_array()
            .and_then(|a| a.first())
            .and_then(|r| r["run_id"].as_str().map(str::to_owned))
        {
            break id;
        }
    };
    let out = sb
        .modix()
        .args(["pending", "add", &run, "also update the README"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    std::fs::write(&marker, "").unwrap();
    let r = GoResult::parse(&child.wait_with_output().unwrap());
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let judge = sb.invocation(&run, 3);
    assert_eq!(judge["state"], "JUDGING");
    assert_eq!(
        judge["context"]["pending"][0]["text"],
        "also update the README"
    );
    assert!(
        sb.invocation(&run, 1)["context"]["pending"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_fork_continues_from_a_mid_run_step_on_its_own_branch() {
    let sb = Sandbox::example();
    let root = sb.root();
    for args in [
        &["init", "-q"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "base",
        ],
    ] {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(&root)
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let source = r.run_id();
    let started = r
        .events
        .iter()
        .find(|e| e["type"] == "run_started")
        .unwrap();
    assert!(started.get("forked_from").is_none(), "{started}");
    // Step 3 recorded the first (wrong) fix; fork after it.
    let r = json_run(
        &sb,
        &[
            "fork",
            &source,
            "--at",
            "3",
            "--note",
            "look again",
            "--json",
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let fork = r.run_id();
    assert_ne!(fork, source);
    let started = r
        .events
        .iter()
        .find(|e| e["type"] == "run_started")
        .unwrap();
    assert_eq!(
        started["forked_from"],
        serde_json::json!({"run_id": source, "seq": 3}),
        "{started}"
    );
    assert_eq!(r.path()[0], "TESTING -tests_fail-> EXECUTING");
    let out = sb
        .modix()
        .args(["history", &fork, "--json"])
        .output()
        .unwrap();
    let h: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(h["run"]["forked_from"]["run_id"], source);
    assert_eq!(h["run"]["forked_from"]["seq"], 3);
    let seqs: Vec<u64> = h["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        h["transitions"][2]["reason"],
        sb.modix()
            .args(["history", &source, "--json"])
            .output()
            .map(|o| {
                serde_json::from_slice::<Value>(&o.stdout).unwrap()["transitions"][2]["reason"]
                    .clone()
            })
            .unwrap()
    );
    // Its branch starts at the step's commit, not at the base.
    let ws = &h["run"]["workspace"];
    let source_ws = serde_json::from_slice::<Value>(
        &sb.modix()
            .args(["history", &source, "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()["run"]["workspace"]
        .clone();
    assert_ne!(ws["base_commit"], source_ws["base_commit"]);
    assert_ne!(ws["short_id"], source_ws["short_id"]);
    let out = sb.modix().args(["history", &fork]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains(&format!("forked from run {source} at step 3"))
    );
    let out = sb
        .modix()
        .args(["fork", &source, "--at", "99"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
}

#[test]
fn on_a_terminal_go_asks_at_the_gate_and_goes_on() {
    let sb = Sandbox::example();
    gated(&sb);
    let Some(screen) = crate::term::Screen::start(&sb, &["go", "Fix mean()"], 120, 40) else {
        return;
    };
    screen.wait_for("Approve the plan? ([a] approved, [r] rejected; [q] answer later):");
    screen.keys("r");
    screen.keys("Enter");
    screen.wait_for("Note (why; it reaches the next agents):");
    screen.keys("Enter");
    screen.wait_for("A note is needed here:");
    screen.keys("one task per function");
    screen.keys("Enter");
    // Planned again, and asked again.
    screen.wait_for("rejected by ");
    let text = screen.wait_for("2. PLANNING");
    assert!(text.contains("one task per function"), "{text}");
    screen.keys("a");
    screen.keys("Enter");
    screen.wait_for("Note for the next agents (Enter for none):");
    screen.keys("Enter");
    let text = screen.wait_for("[exit ");
    assert!(
        text.contains("[exit 0]") && text.contains("reached DONE"),
        "{text}"
    );
}

#[test]
fn status_of_an_ended_run_says_how_long_it_took_not_how_long_since() {
    let sb = Sandbox::example();
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let elapsed = |sb: &Sandbox| {
        let out = sb
            .modix()
            .args(["status", "last", "--json"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["elapsed_ms"].as_u64().unwrap()
    };
    let first = elapsed(&sb);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(elapsed(&sb), first, "an ended run's duration grew");
    let text = output_text(&sb.modix().args(["status", "last"]).output().unwrap());
    assert!(
        text.contains(" in all, workflow") && !text.contains("so far"),
        "{text}"
    );
}

#[test]
fn a_pending_message_no_agent_got_before_the_run_ended_is_said() {
    let sb = Sandbox::example();
    let marker = sb.dir.path().join("testing");
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] =
            serde_json::json!(["sh", "-c", format!("touch {}; sleep 2", marker.display())])
    });
    let child = sb.spawn(&["go", "--json", "Fix mean()"]);
    crate::scenarios::wait_for(&marker);
    let out = sb
        .modix()
        .args(["pending", "add", "last", "too late for anyone"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let r = GoResult::parse(&crate::scenarios::finished_within(child, "the run"));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let notice = r
        .events
        .iter()
        .find(|e| e["type"] == "notice")
        .unwrap_or_else(|| panic!("no notice: {:?}", r.events));
    assert!(
        notice["message"]
            .as_str()
            .unwrap()
            .starts_with("1 pending message never reached an agent: the run ended first"),
        "{notice}"
    );
}

/// Two (here three) people answering the same gate at once: exactly one
/// answer drives the run on, the others are refused as "busy" (or find the
/// gate answered), and the run keeps its one owner throughout — it never
/// shows as interrupted while the winner drives it, so `modix stop` asks
/// that process rather than killing its agent as a crash's leftover.
#[test]
fn answers_racing_at_one_gate_leave_one_driver_and_its_claim() {
    let sb = Sandbox::example();
    gated(&sb);
    slow_executor(&sb, &sb.dir.path().join("executing"), 4);
    let run = sb.go_json("Fix mean()").run_id();
    let mut answers: Vec<_> = (0..3)
        .map(|_| sb.spawn(&["approve", &run, "--json"]))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut outs, mut checked) = (Vec::new(), false);
    while !answers.is_empty() {
        assert!(Instant::now() < deadline, "the answers never ended");
        if let Some(i) = answers
            .iter_mut()
            .position(|c| c.try_wait().unwrap().is_some())
        {
            outs.push(answers.remove(i).wait_with_output().unwrap());
            continue;
        }
        if answers.len() == 1 && !checked {
            // The others are done: the run is held by the one left (about
            // to say running, or running), not let go by a loser.
            let listed = &sb.runs()[0];
            assert!(listed["owner_pid"].is_u64(), "{listed}");
            assert_eq!(listed["owner_gone"], false, "{listed}");
            checked = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(checked, "the refused answers ended before the winner's run");
    let mut winner = None;
    for out in outs {
        if out.status.code() == Some(0) {
            winner = Some(GoResult::parse(&out));
            continue;
        }
        assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("one JSON error object ({e}): {}", output_text(&out)));
        let code = v["error"]["code"].as_str().unwrap();
        assert!(
            ["busy", "changed", "usage", "not_resumable"].contains(&code),
            "refused as someone else's answer, not a workspace in use: {v}"
        );
    }
    let winner = winner.expect("one answer drives the run");
    assert_eq!(winner.transitions.last().unwrap()["to"], "DONE");
    let steps = sb.history_json(&run)["transitions"]
        .as_array()
        .unwrap()
        .clone();
    let answered = steps.iter().filter(|t| t["event"] == "approved").count();
    assert_eq!(answered, 1, "{steps:?}");
}

/// `status --watch` whose reader went away (`| head -1`) ends, rather than
/// redrawing for nobody forever (without RUN it watches until stopped).
#[test]
fn status_watch_ends_when_its_reader_goes_away() {
    use std::io::Read as _;
    let sb = Sandbox::example();
    gated(&sb);
    sb.go_json("Fix mean()");
    let mut child = sb.spawn(&["status", "--watch"]);
    let mut first = [0u8; 16];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    assert!(first.starts_with(b"Run "), "{first:?}");
    drop(child.stdout.take());
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("status --watch went on with nobody reading");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{}",
        output_text(&out)
    );
}

/// `modix stop` of a run waiting at a gate marks it stopped there; an
/// answer is then refused saying how to bring it back (resume), and once
/// resumed it waits at the same gate and takes the answer.
#[test]
fn a_run_stopped_at_its_gate_is_answered_after_a_resume_and_says_so() {
    let sb = Sandbox::example();
    gated(&sb);
    let run = sb.go_json("Fix mean()").run_id();
    let out = sb.modix().args(["stop", &run]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("stopped (it was waiting at APPROVE_PLAN)"),
        "{}",
        output_text(&out)
    );
    assert_eq!(sb.runs()[0]["status"], "stopped");
    let out = sb
        .modix()
        .args(["approve", &run, "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (message, help) = (&v["error"]["message"], &v["error"]["help"]);
    assert!(
        message
            .as_str()
            .unwrap()
            .contains("is not waiting at a gate (it is stopped in APPROVE_PLAN)"),
        "{v}"
    );
    assert!(
        help.as_str()
            .unwrap()
            .contains(&format!("modix resume {run}")),
        "{v}"
    );
    let r = json_run(&sb, &["resume", &run, "--json"]);
    assert_eq!(r.code, Some(4), "back at its gate: {}", r.stderr);
    let r = json_run(&sb, &["approve", &run, "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.transitions.last().unwrap()["to"], "DONE");
}

/// A blank `--note` (`--note "$UNSET"`) is no note: the record says who
/// answered, with no dangling `: `, and the next agent is not handed an
/// empty message as what a person said.
#[test]
fn a_blank_note_is_no_note() {
    let sb = Sandbox::example();
    gated(&sb);
    let run = sb.go_json("Fix mean()").run_id();
    let r = json_run(&sb, &["approve", &run, "--note", "  ", "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let reason = r.transitions[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("approved by ") && !reason.contains(':'),
        "{reason}"
    );
    let inv = sb.invocation(&run, 2);
    assert_eq!(inv["state"], "EXECUTING");
    assert!(inv["context"]["notes"][0]["note"].is_null(), "{inv}");
}
