//! `modix validate` on a corpus of broken configs: every problem reported with
//! its file, its place and a fix, exit code 2, and never a panic.

use crate::util::{Sandbox, output_text};

/// Runs validate, expects exit 2, and returns everything it printed.
fn invalid(sb: &Sandbox) -> String {
    let out = sb.modix().arg("validate").output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(!text.contains("panicked"), "{text}");
    text
}

fn assert_has(text: &str, needles: &[&str]) {
    for n in needles {
        assert!(text.contains(n), "missing {n:?} in:\n{text}");
    }
}

#[test]
fn syntax_error_names_line_and_column() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/shells.json",
        "{\n  \"shells\": {\n    \"claude\": { \"preset\": \"claude\", }\n  }\n}\n",
    );
    let text = invalid(&sb);
    assert_has(
        &text,
        &[".modix/shells.json:3:37", "config::syntax", "invalid JSON"],
    );
}

#[test]
fn unknown_key_is_an_error_with_a_suggestion() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/brains.json",
        "{\n  \"brains\": {\n    \"a\": {\n      \"provider\": \"anthropic\",\n      \"model\": \"sonnet\",\n      \"api_key_evn\": \"X\"\n    }\n  }\n}\n",
    );
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            ".modix/brains.json:6:7",
            "config::unknown-key",
            "unknown key `api_key_evn`",
            "did you mean `api_key_env`?",
            "/brains/a/api_key_evn",
        ],
    );
}

#[test]
fn wrong_type_names_the_pointer_and_line() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/runtimes.json",
        "{\n  \"timeouts\": {\n    \"default_secs\": \"ten\"\n  }\n}\n",
    );
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            ".modix/runtimes.json:3:21",
            "config::schema",
            "/timeouts/default_secs",
            "\"ten\" is not of type \"integer\"",
        ],
    );
}

/// The durability setting takes its two words only, and says which.
#[test]
fn an_unknown_durability_names_the_two_there_are() {
    let sb = Sandbox::initialized();
    sb.write(".modix/runtimes.json", "{\n  \"durability\": \"fast\"\n}\n");
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            ".modix/runtimes.json:2:17",
            "config::schema",
            "\"fast\" is not one of \"full\" or \"pipelined\" (at /durability)",
            "change the value at /durability",
        ],
    );
}

#[test]
fn missing_required_field() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/brains.json",
        "{\n  \"brains\": {\n    \"a\": { \"provider\": \"anthropic\" }\n  }\n}\n",
    );
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            ".modix/brains.json:3:10",
            "\"model\" is a required property",
            "/brains/a",
        ],
    );
}

#[test]
fn unknown_shell_brain_and_fsm_references_suggest_known_names() {
    let sb = Sandbox::initialized();
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["planner"]["shell"] = "claud".into();
        v["agents"]["executor"]["brain"] = "antropic".into();
        v["agents"]["tester"]["fsm"] = "execution_fsm_v2".into();
    });
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            "unknown shell `claud`",
            "did you mean `claude`?",
            "/agents/planner/shell",
            "unknown brain `antropic`",
            "did you mean `anthropic`?",
            "unknown lifecycle FSM `execution_fsm_v2`",
            "did you mean `execution_fsm_v1`?",
        ],
    );
    // Each names the file and line of the offending value.
    let shell_line = sb
        .read(".modix/agents.json")
        .lines()
        .position(|l| l.contains("\"claud\""))
        .unwrap()
        + 1;
    assert_has(&text, &[&format!(".modix/agents.json:{shell_line}:")]);
}

#[test]
fn bad_semver_range() {
    let sb = Sandbox::initialized();
    sb.write(".modix/shells.json", "{\n  \"shells\": {\n    \"claude\": { \"preset\": \"claude\", \"requires\": \">>1\" }\n  }\n}\n");
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            ".modix/shells.json:3:49",
            "config::semver",
            "`>>1` is not a semver requirement",
        ],
    );
}

#[test]
fn unsupported_major_version_says_what_to_do() {
    let sb = Sandbox::initialized();
    sb.write(".modix/version.json", "{\n  \"format\": \"2.0.0\"\n}\n");
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            ".modix/version.json:2:13",
            "config format 2.0.0 is not supported: this modix reads format 1.x",
            "install a newer modix",
        ],
    );
}

#[test]
fn newer_minor_version_is_only_a_warning() {
    let sb = Sandbox::initialized();
    sb.write(".modix/version.json", "{\n  \"format\": \"1.4.0\"\n}\n");
    let out = sb.modix().arg("validate").output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert_has(&text, &["warning", "1.4.0 is newer than this modix"]);
}

#[test]
fn every_problem_is_reported_at_once() {
    let sb = Sandbox::initialized();
    sb.write(".modix/version.json", "{\n  \"format\": \"9.0.0\"\n}\n");
    sb.write(
        ".modix/runtimes.json",
        "{\n  \"loops\": { \"default_max\": 0 }\n}\n",
    );
    sb.write(
        ".modix/projects.json",
        "{ \"name\": \"x\", \"workspace\": \"cloud\" }\n",
    );
    // modix's own pointer file: reported too, as a warning.
    sb.write(".modix/state.json", "{ not json");
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            ".modix/version.json:2",
            ".modix/runtimes.json:2",
            ".modix/projects.json:1",
            ".modix/state.json:1",
        ],
    );

    let out = sb.modix().args(["validate", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(
        (&v["errors"], &v["warnings"]),
        (&3.into(), &1.into()),
        "{v:#}"
    );
    let files: Vec<&str> = v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["file"].as_str().unwrap())
        .collect();
    assert!(files.contains(&".modix/state.json"), "{files:?}");
}

#[test]
fn missing_file_suggests_init() {
    let sb = Sandbox::initialized();
    std::fs::remove_file(sb.root().join(".modix/brains.json")).unwrap();
    let text = invalid(&sb);
    assert_has(
        &text,
        &[".modix/brains.json", "file is missing", "modix init"],
    );
}

#[test]
fn manifest_file_and_prompt_templates_are_checked() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/manifests/planner.json",
        "{ \"prompt\": \"prompts/nope.md\", \"output_schema\": \"task_spce\" }\n",
    );
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["planner"]["manifest"] = "manifests/planner.json".into();
    });
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            "prompt template `.modix/prompts/nope.md` does not exist",
            "unknown output schema `task_spce`",
            "did you mean `task_spec`?",
        ],
    );
}

#[test]
fn global_settings_are_validated_and_layered() {
    let sb = Sandbox::initialized();
    // An agent without a shell takes the default shell from the global settings.
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["planner"]
            .as_object_mut()
            .unwrap()
            .remove("shell");
    });
    sb.write(
        "../home/settings.json",
        "{ \"default_shell\": \"codex\" }\n",
    );
    sb.modix().arg("validate").assert().success();
    // The environment beats the settings file.
    let out = sb
        .modix()
        .env("MODIX_DEFAULT_SHELL", "nope")
        .arg("validate")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(output_text(&out).contains("unknown shell `nope` (the default shell from settings)"));
    // A broken settings file is reported with its path.
    sb.write("../home/settings.json", "{ \"colour\": \"never\" }\n");
    let out = sb.modix().arg("validate").output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert_has(
        &text,
        &[
            "settings.json:1:3",
            "unknown key `colour`",
            "did you mean `color`?",
        ],
    );
}

#[test]
fn validate_checks_the_projects_fsm_files() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/fsm/review.toml",
        "id = \"review\"\nversion = \"1.0.0\"\ndescription = \"d\"\ninitial = \"START\"\n\n[states.START]\nkind = \"input\"\nevent = \"go\"\n\n[states.END]\nkind = \"terminal\"\noutcome = \"success\"\n\n[[transitions]]\nfrom = \"START\"\nevent = \"go\"\nto = \"ENDD\"\n",
    );
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            ".modix/fsm/review.toml:17:6",
            "fsm::unknown-state",
            "transition to unknown state `ENDD`",
            "did you mean `END`?",
        ],
    );
}

#[test]
fn the_workflow_must_find_its_agents() {
    let sb = Sandbox::initialized();
    sb.edit_json(".modix/agents.json", |v| {
        let planner = v["agents"]["planner"].take();
        v["agents"].as_object_mut().unwrap().remove("planner");
        v["agents"]["architect"] = planner;
        v["agents"]["architect"]["role"] = "architect".into();
    });
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            "workflow `plan_execute_test` (built-in), state PLANNING: no agent has id or role `planner`",
        ],
    );
}

/// `state.json` is modix's own pointer file (SQLite is the truth, nothing
/// reads it back): checked when present, but a damaged one is a warning
/// that says to delete it, and never stops a run.
#[test]
fn state_json_is_optional_and_a_damaged_one_only_warns() {
    let sb = Sandbox::initialized();
    std::fs::remove_file(sb.root().join(".modix/state.json")).unwrap();
    sb.modix().arg("validate").assert().success();
    sb.write(".modix/state.json", "{ \"run\": 3 }\n");
    let out = sb.modix().arg("validate").output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert_has(
        &text,
        &[
            ".modix/state.json:1:10: warning[config::schema]",
            "/run",
            "help: modix writes this file itself and never reads it back: delete it",
        ],
    );
    sb.write(".modix/state.json", "{\"run_id\": \"01ABC\", \"state\": \n");
    let out = sb
        .modix()
        .args(["go", "--dry-run", "hello"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
}

#[test]
fn unknown_placeholder_in_shell_args() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/shells.json",
        "{\n  \"shells\": {\n    \"claude\": { \"preset\": \"claude\" },\n    \"codex\": { \"preset\": \"codex\" },\n    \"gemini\": { \"preset\": \"gemini\" },\n    \"aider\": { \"preset\": \"aider\" },\n    \"mine\": { \"binary\": \"x\", \"args\": [\"--model\", \"{modle}\"] }\n  }\n}\n",
    );
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            ".modix/shells.json:7:38",
            "config::placeholder",
            "{modle}",
            "use only {prompt} {model}",
        ],
    );
}

#[test]
fn a_read_only_agent_on_a_shell_without_a_read_only_mode_is_warned_about() {
    let sb = Sandbox::initialized();
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["planner"]["shell"] = "aider".into()
    });
    let out = sb.modix().arg("validate").output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "a warning does not fail: {text}");
    assert_has(
        &text,
        &[
            "warning[config::permissions]",
            "agent `planner` may not write files, but shell `aider` has no read-only mode",
        ],
    );
}

/// A file of entries whose own shape is wrong (an array, or `shells` not an
/// object) is, like a syntax error, one problem: the names other files give
/// its entries are not reported again as unknown.
#[test]
fn a_file_of_the_wrong_shape_is_one_error_without_follow_ons() {
    let sb = Sandbox::initialized();
    sb.write(".modix/agents.json", "[{\"planner\": {}}]\n");
    sb.write(".modix/shells.json", "{\"shells\": []}\n");
    let out = sb.modix().args(["validate", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let found: Vec<(&str, &str, &str)> = json["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let s = |k: &str| d[k].as_str().unwrap_or("");
            (s("file"), s("code"), s("pointer"))
        })
        .collect();
    assert_eq!(
        found,
        [
            (".modix/agents.json", "config::schema", ""),
            (".modix/shells.json", "config::schema", "/shells"),
        ],
        "{json:#}"
    );
}

/// `(file, code, pointer)` of every diagnostic of `validate --json`, which must fail.
fn findings(sb: &Sandbox) -> Vec<(String, String, String)> {
    let out = sb.modix().args(["validate", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    json["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let s = |k: &str| d[k].as_str().unwrap_or("").to_owned();
            (s("file"), s("code"), s("pointer"))
        })
        .collect()
}

/// An empty or blank program name would only fail when the command runs
/// ("command `` not found"); a command or shell that is itself broken does
/// not also make the agent "a shell agent without a shell".
#[test]
fn empty_program_names_are_refused_and_broken_bindings_bring_no_follow_ons() {
    let sb = Sandbox::initialized();
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"] = serde_json::json!({"role": "tester", "command": [""]});
        v["agents"]["lint"] = serde_json::json!({"role": "lint", "command": [" \t"]});
        v["agents"]["none"] = serde_json::json!({"role": "none", "command": []});
        v["agents"]["planner"]["shell"] = 5.into();
    });
    sb.edit_json(".modix/projects.json", |v| {
        v["commands"] = serde_json::json!({"build": ["make"], "probes": {"test": [""]}});
    });
    let at = |file: &str, code: &str, pointer: &str| {
        (
            format!(".modix/{file}"),
            code.to_owned(),
            pointer.to_owned(),
        )
    };
    assert_eq!(
        findings(&sb),
        [
            at("agents.json", "config::command", "/agents/lint/command/0"),
            at("agents.json", "config::schema", "/agents/none/command"),
            at("agents.json", "config::schema", "/agents/planner/shell"),
            at("agents.json", "config::command", "/agents/tester/command/0"),
            at(
                "projects.json",
                "config::command",
                "/commands/probes/test/0"
            ),
        ]
    );
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            "error[config::command]: the program name (the command's first item) is empty (at /agents/tester/command/0)",
            "is only whitespace (at /agents/lint/command/0)",
            "help: write the program to run as the first item and its arguments after it",
        ],
    );
}

/// JSON Schema counts `1e3` and `60.0` as integers, so they pass it; an
/// integer field then refuses them. Each is reported at its own place with
/// the number to write, not as a type error of the object around it.
#[test]
fn whole_numbers_written_as_decimals_are_pointed_at_with_the_fix() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/agents.json",
        &sb.read(".modix/agents.json").replacen(
            "\"timeout_secs\": 600",
            "\"timeout_secs\": 1e3",
            1,
        ),
    );
    sb.write(
        ".modix/runtimes.json",
        &sb.read(".modix/runtimes.json").replacen(
            "\"kill_grace_secs\": 5",
            "\"kill_grace_secs\": 5.0",
            1,
        ),
    );
    let text = invalid(&sb);
    assert_has(
        &text,
        &[
            "error[config::schema]: `1e3` is not written as a whole number, and this field takes only whole numbers (at /agents/planner/manifest/timeout_secs)",
            "help: write a whole number: 1000",
            "error[config::schema]: `5.0` is not written as a whole number, and this field takes only whole numbers (at /timeouts/kill_grace_secs)",
            "help: write a whole number: 5",
        ],
    );
    assert!(!text.contains("expected u64"), "{text}");
}
#[test]
fn a_valid_project_is_counted_in_the_singular_and_the_plural() {
    let sb = Sandbox::example();
    for (file, key, gone) in [
        (".modix/shells.json", "shells", "claude"),
        (".modix/brains.json", "brains", "anthropic"),
    ] {
        sb.edit_json(file, |v| {
            v[key].as_object_mut().unwrap().remove(gone);
        });
    }
    let out = sb.modix().arg("validate").output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok: .modix is valid (1 shell, 1 brain, 3 agents, 3 workflows)\n"
    );
}
