//! `modix fsm`: one small bad file per check (code, line, message), clean
//! machines, overrides, list/show/graph output and the shipped worst case.

use std::process::Command as StdCommand;

use crate::util::Sandbox;

const GOOD: &str = r#"id = "t"
version = "1.0.0"
initial = "A"

[states.A]
kind = "input"
event = "go"

[states.B]
kind = "agent"
agent = "worker"
output = "any"
emit = [{ on = "output", event = "ok" }, { on = "invalid_output", event = "bad" }, { on = "process_error", event = "bad" }, { on = "timeout", event = "bad" }]

[states.DONE]
kind = "terminal"
outcome = "success"

[states.FAIL]
kind = "terminal"
outcome = "failure"

[[transitions]]
from = "A"
event = "go"
to = "B"

[[transitions]]
from = "B"
event = "ok"
to = "DONE"

[[transitions]]
from = "B"
event = "bad"
to = "FAIL"
"#;

/// A sandbox whose project holds only these `.modix/fsm/` files.
fn project(files: &[(&str, &str)]) -> Sandbox {
    let sb = Sandbox::new();
    for (name, text) in files {
        sb.write(&format!(".modix/fsm/{name}"), text);
    }
    sb
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(sb: &Sandbox, args: &[&str]) -> Run {
    let out = sb
        .modix()
        .args(["--color", "never"])
        .args(args)
        .output()
        .expect("run modix");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `fsm check` on a project holding `text` reports `code` at `line` with `message`.
fn assert_finding(text: &str, code: &str, line: usize, message: &str) {
    let dir = project(&[("bad.toml", text)]);
    let r = run(&dir, &["fsm", "check"]);
    assert_eq!(
        r.code, 2,
        "exit code\nstdout:\n{}\nstderr:\n{}",
        r.stdout, r.stderr
    );
    let headline = r
        .stderr
        .lines()
        .find(|l| l.contains(&format!("error[{code}]")))
        .unwrap_or_else(|| panic!("no {code} in:\n{}", r.stderr));
    assert!(
        headline.contains(&format!(".modix/fsm/bad.toml:{line}:")),
        "wrong line for {code}: {headline}"
    );
    assert!(headline.contains(message), "wrong message: {headline}");
    assert!(r.stdout.contains(".modix/fsm/bad.toml: has errors"));
}

fn appended(extra: &str) -> String {
    format!("{GOOD}\n{extra}")
}

#[test]
fn syntax_error() {
    assert_finding(&appended("foo = [\n"), "fsm::syntax", 38, "unclosed array");
}

#[test]
fn unknown_key() {
    let text = GOOD.replace("agent = \"worker\"", "agnet = \"worker\"");
    assert_finding(&text, "fsm::unknown-key", 11, "unknown field `agnet`");
}

#[test]
fn invalid_field_bad_semver() {
    let text = GOOD.replace("version = \"1.0.0\"", "version = \"1.0\"");
    assert_finding(
        &text,
        "fsm::invalid-field",
        2,
        "version `1.0` is not semver",
    );
}

#[test]
fn invalid_field_bad_when() {
    let text = GOOD.replace(
        "{ on = \"output\", event = \"ok\" }",
        "{ on = \"output\", when = \"ok = true\", event = \"ok\" }",
    );
    assert_finding(&text, "fsm::invalid-field", 13, "has no `==` or `!=`");
}

#[test]
fn missing_initial() {
    let text = GOOD.replace("initial = \"A\"\n", "");
    assert_finding(&text, "fsm::missing-initial", 1, "no `initial` state");
}

#[test]
fn unknown_initial() {
    let text = GOOD.replace("initial = \"A\"", "initial = \"START\"");
    assert_finding(
        &text,
        "fsm::unknown-initial",
        3,
        "initial state `START` is not defined",
    );
}

#[test]
fn unknown_state() {
    let text = GOOD.replace("to = \"DONE\"", "to = \"DONEE\"");
    assert_finding(&text, "fsm::unknown-state", 31, "unknown state `DONEE`");
    let dir = project(&[("bad.toml", &text)]);
    assert!(
        run(&dir, &["fsm", "check"])
            .stderr
            .contains("did you mean `DONE`?")
    );
}

#[test]
fn duplicate_state() {
    let text = appended("[states.B]\nkind = \"terminal\"\noutcome = \"failure\"\n");
    assert_finding(
        &text,
        "fsm::duplicate-state",
        38,
        "state `B` is defined twice",
    );
}

#[test]
fn duplicate_transition() {
    let text = appended("[[transitions]]\nfrom = \"B\"\nevent = \"ok\"\nto = \"DONE\"\n");
    assert_finding(&text, "fsm::duplicate-transition", 38, "is defined twice");
}

#[test]
fn terminal_exit() {
    let text = appended("[[transitions]]\nfrom = \"DONE\"\nevent = \"again\"\nto = \"A\"\n");
    assert_finding(
        &text,
        "fsm::terminal-exit",
        39,
        "leaves terminal state `DONE`",
    );
}

#[test]
fn nondeterministic() {
    let text = appended("[[transitions]]\nfrom = \"B\"\nevent = \"ok\"\nto = \"FAIL\"\n");
    assert_finding(
        &text,
        "fsm::nondeterministic",
        40,
        "state `B` has two transitions on event `ok`",
    );
}

#[test]
fn unreachable() {
    let text = appended("[states.LOST]\nkind = \"terminal\"\noutcome = \"failure\"\n");
    assert_finding(
        &text,
        "fsm::unreachable",
        38,
        "state `LOST` cannot be reached",
    );
}

#[test]
fn no_terminal() {
    let text = appended(
        "[states.STUCK]\nkind = \"agent\"\nagent = \"w\"\noutput = \"any\"\n\n\
         [[transitions]]\nfrom = \"B\"\nevent = \"stuck\"\nto = \"STUCK\"\n",
    );
    assert_finding(
        &text,
        "fsm::no-terminal",
        38,
        "no terminal state can be reached from state `STUCK`",
    );
}

#[test]
fn unhandled_event() {
    let text = GOOD.replace(
        "{ on = \"timeout\", event = \"bad\" }",
        "{ on = \"timeout\", event = \"late\" }",
    );
    assert_finding(
        &text,
        "fsm::unhandled-event",
        13,
        "can emit event `late` but no transition handles it",
    );
}

#[test]
fn unbounded_cycle_names_states_in_order() {
    let text = appended("[[transitions]]\nfrom = \"B\"\nevent = \"retry\"\nto = \"A\"\n");
    assert_finding(
        &text,
        "fsm::unbounded-cycle",
        23,
        "cycle A → B → A has no bounded transition",
    );
}

#[test]
fn redirect_back_into_the_cycle_is_unbounded() {
    let text = appended(
        "[[transitions]]\nfrom = \"B\"\nevent = \"retry\"\nto = \"A\"\nmax = 2\nexhausted = \"A\"\n",
    );
    assert_finding(&text, "fsm::unbounded-cycle", 23, "cycle A → B → A");
}

#[test]
fn max_without_exhausted() {
    let text = appended("[[transitions]]\nfrom = \"B\"\nevent = \"retry\"\nto = \"A\"\nmax = 2\n");
    assert_finding(
        &text,
        "fsm::max-without-exhausted",
        42,
        "has `max` but no `exhausted` state",
    );
}

#[test]
fn duplicate_id_across_project_files() {
    let dir = project(&[("a.toml", GOOD), ("bad.toml", GOOD)]);
    let r = run(&dir, &["fsm", "check"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains(".modix/fsm/bad.toml:1:6: error[fsm::duplicate-id]: id `t` is already defined by .modix/fsm/a.toml"),
        "{}",
        r.stderr
    );
}

#[test]
fn warnings_do_not_fail() {
    // A lifecycle (its agent is `self`) that finds no event for an outcome
    // just ends the invocation as failed: a warning.
    let text = GOOD
        .replace(", { on = \"timeout\", event = \"bad\" }", "")
        .replace("agent = \"worker\"", "agent = \"self\"");
    let dir = project(&[("warn.toml", &text)]);
    let r = run(&dir, &["fsm", "check"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains(".modix/fsm/warn.toml:9:9: warning[fsm::uncovered-outcome]"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("no unconditional emit rule for: timeout"));
    assert!(r.stdout.contains("t 1.0.0: ok"));
}

#[test]
fn a_workflow_needs_an_event_for_every_outcome() {
    // A workflow state with no rule for an outcome would stop a run mid-way
    // on configuration: an error, so `validate` and `go` refuse it up front.
    let text = GOOD.replace(", { on = \"timeout\", event = \"bad\" }", "");
    let dir = project(&[("wf.toml", &text)]);
    let r = run(&dir, &["fsm", "check"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains(".modix/fsm/wf.toml:9:9: error[fsm::uncovered-outcome]"),
        "{}",
        r.stderr
    );
}

#[test]
fn clean_custom_machine_with_bounded_loop() {
    let text = appended(
        "[[transitions]]\nfrom = \"B\"\nevent = \"retry\"\nto = \"A\"\nmax = 2\nexhausted = \"FAIL\"\n",
    );
    let dir = project(&[("loop.toml", &text)]);
    let r = run(&dir, &["fsm", "check", "t"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // go, (retry, go) × 2, then retry redirected to FAIL (or ok / bad): 6 steps; B runs 3 times.
    assert!(
        r.stdout.contains(
            "t 1.0.0: ok — worst case exactly 6 transitions; agent invocations at most: B 3"
        ),
        "{}",
        r.stdout
    );
}

#[test]
fn exhausted_without_max_takes_the_default_bound() {
    let text = appended(
        "[[transitions]]\nfrom = \"B\"\nevent = \"retry\"\nto = \"A\"\nexhausted = \"FAIL\"\n",
    );
    let dir = project(&[("loop.toml", &text)]);
    let r = run(&dir, &["fsm", "show", "t"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("B\tretry\tA\t3\tFAIL\n"), "{}", r.stdout);
}

#[test]
fn exhausted_without_max_takes_the_projects_loop_bound() {
    let text = appended(
        "[[transitions]]\nfrom = \"B\"\nevent = \"retry\"\nto = \"A\"\nexhausted = \"FAIL\"\n",
    );
    let dir = project(&[("loop.toml", &text)]);
    std::fs::write(
        dir.root().join(".modix/runtimes.json"),
        r#"{"loops": {"default_max": 5}}"#,
    )
    .expect("write runtimes.json");
    let r = run(&dir, &["fsm", "show", "t"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("B\tretry\tA\t5\tFAIL\n"), "{}", r.stdout);
    // A → B, five rounds B → A → B, then the sixth retry redirected to FAIL.
    let r = run(&dir, &["fsm", "check", "t"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(
            "t 1.0.0: ok — worst case exactly 12 transitions; agent invocations at most: B 6"
        ),
        "{}",
        r.stdout
    );
}

#[test]
fn shipped_machine_worst_case_is_exact() {
    let dir = Sandbox::new();
    let r = run(&dir, &["fsm", "check"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains(
        "plan_execute_test 1.0.0: ok — worst case exactly 12 transitions; agent invocations at most: PLANNING 1, EXECUTING 6, TESTING 4"
    ), "{}", r.stdout);
    assert!(r.stdout.contains(
        "execution_fsm_v1 1.0.0: ok — worst case exactly 2 transitions; agent invocations at most: EXECUTING 1"
    ));
    let r = run(&dir, &["fsm", "check", "--json", "plan_execute_test"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
    assert_eq!(v["errors"], 0);
    assert_eq!(v["machines"][0]["worst_case"]["transitions"], 12);
    assert_eq!(v["machines"][0]["worst_case"]["exact"], true);
    assert_eq!(
        v["machines"][0]["worst_case"]["agent_invocations"]["EXECUTING"],
        6
    );
}

#[test]
fn check_json_reports_findings() {
    let text = GOOD.replace("to = \"DONE\"", "to = \"DONEE\"");
    let dir = project(&[("bad.toml", &text)]);
    let r = run(&dir, &["fsm", "check", "--json"]);
    assert_eq!(r.code, 2);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
    // The first error (the file's agent state also draws a warning).
    let d = v["diagnostics"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["severity"] == "error"))
        .expect("an error");
    assert_eq!(d["code"], "fsm::unknown-state");
    assert_eq!(d["file"], ".modix/fsm/bad.toml");
    assert_eq!(d["line"], 31);
    assert_eq!(d["severity"], "error");
}

#[test]
fn check_a_file_by_path_outside_a_project() {
    let dir = Sandbox::new();
    std::fs::write(dir.root().join("mine.toml"), GOOD).expect("write");
    let r = run(&dir, &["fsm", "check", "mine.toml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("t 1.0.0: ok — worst case exactly 2 transitions")
    );
    assert!(!r.stdout.contains("plan_execute_test"));
}

#[test]
fn check_unknown_id_is_a_usage_error() {
    let dir = Sandbox::new();
    let r = run(&dir, &["fsm", "check", "plan_exec_test"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("`plan_exec_test` is neither a file nor a known machine id")
    );
    assert!(r.stderr.contains("`plan_execute_test`"), "{}", r.stderr);
}

#[test]
fn project_file_overrides_builtin_with_same_id() {
    let text = GOOD
        .replace("id = \"t\"", "id = \"plan_execute_test\"")
        .replace("1.0.0", "2.0.0");
    let dir = project(&[("pet.toml", &text)]);
    let r = run(&dir, &["fsm", "list"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let row = r
        .stdout
        .lines()
        .find(|l| l.contains("plan_execute_test"))
        .expect("row");
    assert!(
        row.contains("2.0.0") && row.contains(".modix/fsm/pet.toml"),
        "{row}"
    );
    assert_eq!(r.stdout.matches("plan_execute_test").count(), 1);
    let r = run(&dir, &["fsm", "check"]);
    assert!(
        r.stdout
            .contains("plan_execute_test 2.0.0: ok — worst case exactly 2 transitions")
    );
    assert!(!r.stdout.contains("1.0.0: ok — worst case exactly 12"));
}

#[test]
fn list_shows_builtins_outside_a_project() {
    let dir = Sandbox::new();
    let r = run(&dir, &["fsm", "list", "--json"]);
    assert_eq!(r.code, 0);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
    let ids: Vec<&str> = v["machines"]
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["execution_fsm_v1", "looper", "plan_execute_test"]);
    assert_eq!(v["machines"][1]["source"], "built-in");
}

#[test]
fn show_lists_states_and_bounds() {
    let dir = Sandbox::new();
    let r = run(&dir, &["fsm", "show", "plan_execute_test"]);
    assert_eq!(r.code, 0);
    // Piped, a table is tab-separated rows.
    assert!(
        r.stdout
            .contains("INIT (initial)\tinput\tevent epic_received\t")
    );
    assert!(
        r.stdout
            .contains("TESTING\ttests_fail\tEXECUTING\t3\tFAILED\n")
    );
    assert!(
        r.stdout
            .contains("EXECUTING\texecution_rejected\tEXECUTING\t2\tFAILED\n")
    );
    let r = run(&dir, &["fsm", "show", "nope"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("no machine with id `nope`"));
}

#[test]
fn graph_mermaid() {
    let dir = Sandbox::new();
    let r = run(&dir, &["fsm", "graph", "plan_execute_test"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.starts_with("flowchart LR"));
    assert!(
        r.stdout.contains("s3 -->|\"tests_fail (max 3)\"| s2"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("s3 -.->|\"tests_fail (after 3)\"| s5"));
    assert!(r.stdout.contains("class s4 success"));
    assert!(r.stdout.contains("class s5 failure"));
}

#[test]
fn graph_dot_renders_with_graphviz() {
    let dir = Sandbox::new();
    let r = run(
        &dir,
        &["fsm", "graph", "plan_execute_test", "--format", "dot"],
    );
    assert_eq!(r.code, 0);
    assert!(
        r.stdout
            .contains("\"TESTING\" -> \"EXECUTING\" [label=\"tests_fail (max 3)\"];")
    );
    assert!(
        r.stdout
            .contains("\"TESTING\" -> \"FAILED\" [label=\"tests_fail (after 3)\", style=dashed];")
    );
    assert!(r.stdout.contains("\"DONE\" [shape=doublecircle"));
    let dot_file = dir.root().join("g.dot");
    std::fs::write(&dot_file, &r.stdout).expect("write");
    match StdCommand::new("dot").arg("-Tsvg").arg(&dot_file).output() {
        Ok(out) => {
            assert!(
                out.status.success(),
                "dot failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
        }
        Err(_) => eprintln!("note: Graphviz `dot` not on PATH; skipped rendering the dot output"),
    }
}

/// A project file too broken to say its id stands for the id its name
/// says: naming that id shows the file's errors, not the built-in it was
/// meant to replace as if nothing were wrong. A broken file of another
/// name does not hide a built-in.
#[test]
fn a_broken_override_is_what_its_id_shows() {
    let sb = project(&[("plan_execute_test.toml", "garbage [[[\n")]);
    for args in [
        &["fsm", "show", "plan_execute_test"][..],
        &["fsm", "graph", "plan_execute_test"],
        &["fsm", "check", "plan_execute_test"],
    ] {
        let r = run(&sb, args);
        assert_eq!(r.code, 2, "{args:?}\n{}\n{}", r.stdout, r.stderr);
        assert!(
            r.stderr
                .contains(".modix/fsm/plan_execute_test.toml:1:9: error[fsm::syntax]"),
            "{args:?}\n{}",
            r.stderr
        );
    }
    let r = run(&sb, &["fsm", "show", "plan_execute_test", "--json"]);
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("fsm::syntax"), "{}", r.stdout);
    let r = run(&sb, &["fsm", "list"]);
    assert!(!r.stdout.contains("plan_execute_test"), "{}", r.stdout);
    assert!(
        r.stderr.contains("some FSM files have errors"),
        "{}",
        r.stderr
    );

    let sb = project(&[("mine.toml", "garbage [[[\n")]);
    let r = run(&sb, &["fsm", "show", "plan_execute_test"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("(built-in)"), "{}", r.stdout);
    let r = run(&sb, &["fsm", "show", "mine"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("mine.toml:1:9"), "{}", r.stderr);
}
