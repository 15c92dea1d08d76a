//! The built-in shell presets driven end to end against emulators that print
//! exactly the shapes the real CLIs print in headless mode (no model API).

use crate::util::{GoResult, Sandbox, output_text};

const TASK_SPEC: &str = r#"{"title": "Fix mean()", "summary": "Divide by len(values).", "complexity": "low", "tasks": [{"id": "T1", "title": "Fix the divisor", "files": ["calc.py"], "acceptance": ["tests pass"]}]}"#;

/// A fake `claude` that logs its argv and stdin under $HOME and answers in
/// stream-json, the result text holding the TaskSpec in a ```json block.
fn fake_claude(sb: &Sandbox, is_error: bool) {
    sb.fake_bin(
        "claude",
        &format!(
            r#"#!/usr/bin/env python3
import json, os, sys
if sys.argv[1:] == ["--version"]:
    print("2.1.330 (Claude Code)")
    sys.exit(0)
home = os.environ["HOME"]
with open(os.path.join(home, "claude-argv.json"), "w") as f:
    json.dump(sys.argv[1:], f)
with open(os.path.join(home, "claude-stdin.txt"), "w") as f:
    f.write(sys.stdin.read())
print(json.dumps({{"type": "system", "subtype": "init", "session_id": "s1", "model": "sonnet"}}))
print(json.dumps({{"type": "assistant", "message": {{"content": [{{"type": "text", "text": "Let me plan."}}]}}}}))
result = "Here is the plan:\n```json\n" + {spec:?} + "\n```\n"
print(json.dumps({{"type": "result", "subtype": "success", "is_error": {is_error}, "result": result,
                  "total_cost_usd": 0.01, "num_turns": 1, "session_id": "s1"}}))
"#,
            spec = TASK_SPEC,
            is_error = if is_error { "True" } else { "False" },
        ),
    );
}

fn planner_on(sb: &Sandbox, shell: &str, brain: &str) {
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["planner"]["shell"] = shell.into();
        v["agents"]["planner"]["brain"] = brain.into();
        v["agents"]["planner"]["manifest"]
            .as_object_mut()
            .unwrap()
            .remove("requires");
    });
}

#[test]
fn claude_preset_plans_through_stream_json() {
    let sb = Sandbox::example();
    fake_claude(&sb, false);
    planner_on(&sb, "claude", "anthropic");
    let out = sb
        .modix()
        .env("ANTHROPIC_API_KEY", "sk-ant-api03-emulator-key-000000")
        .args(["go", "--json", "Fix mean() in calc.py"])
        .output()
        .unwrap();
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.path()[1], "PLANNING -task_spec_valid-> EXECUTING");

    let home = sb.dir.path().join("home");
    let mut argv: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(home.join("claude-argv.json")).unwrap())
            .unwrap();
    // The schema goes inline, strict (no `$schema`, which would make Claude
    // Code drop the tool; every property required, the optional ones nullable).
    let at = argv.iter().position(|a| a == "--json-schema").unwrap();
    let schema: serde_json::Value = serde_json::from_str(&argv.remove(at + 1)).unwrap();
    argv.remove(at);
    assert!(schema.get("$schema").is_none(), "{schema}");
    let task = &schema["properties"]["tasks"]["items"];
    assert!(
        task["required"]
            .as_array()
            .unwrap()
            .contains(&"description".into()),
        "{task}"
    );
    assert_eq!(
        task["properties"]["description"]["type"],
        serde_json::json!(["string", "null"])
    );
    assert_eq!(
        argv,
        [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--model",
            "sonnet",
            "--permission-mode",
            "default",
            "--allowedTools",
            "Bash(python3 -m unittest -q:*)",
            "--no-session-persistence"
        ],
        "no system prompt, turn or budget caps: their flags are dropped; the planner may \
         not write (headless `default` refuses edits) but may run the project's tests"
    );
    let prompt = std::fs::read_to_string(home.join("claude-stdin.txt")).unwrap();
    assert!(
        prompt.contains("Fix mean() in calc.py"),
        "the prompt goes on stdin: {prompt}"
    );

    let inv = sb.invocation(&r.run_id(), 1);
    assert_eq!(inv["parsed_output"]["title"], "Fix mean()");
}

#[test]
fn claude_is_error_with_exit_zero_is_a_failed_invocation() {
    let sb = Sandbox::example();
    fake_claude(&sb, true);
    planner_on(&sb, "claude", "anthropic");
    let out = sb
        .modix()
        .env("ANTHROPIC_API_KEY", "k")
        .args(["go", "--json", "plan"])
        .output()
        .unwrap();
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.path()[1], "PLANNING -task_spec_invalid-> FAILED");
    let reason = r.transitions[1]["reason"].as_str().unwrap();
    assert!(
        reason.contains("agent failed (agent_error): the CLI reported an error"),
        "{reason}"
    );
}

#[test]
fn codex_preset_reads_the_last_agent_message_and_passes_the_strict_schema() {
    let sb = Sandbox::example();
    sb.fake_bin(
        "codex",
        &format!(
            r#"#!/usr/bin/env python3
import json, os, sys
if sys.argv[1:] == ["--version"]:
    print("codex-cli 0.169.0")
    sys.exit(0)
args = sys.argv[1:]
home = os.environ["HOME"]
with open(os.path.join(home, "codex-argv.json"), "w") as f:
    json.dump(args, f)
# Codex sends --output-schema to the API as a strict schema: modix hands it
# the strict form of the output schema (docs/agents.md).
schema = args[args.index("--output-schema") + 1]
with open(schema) as f, open(os.path.join(home, "codex-schema.json"), "w") as out:
    out.write(f.read())
assert args[-1] == "-" and "Fix" in sys.stdin.read()
print(json.dumps({{"type": "thread.started", "thread_id": "t1"}}))
print(json.dumps({{"type": "item.completed", "item": {{"id": "i0", "type": "reasoning", "text": "thinking"}}}}))
print(json.dumps({{"type": "item.completed", "item": {{"id": "i1", "type": "agent_message", "text": {spec:?}}}}}))
print(json.dumps({{"type": "turn.completed", "usage": {{"input_tokens": 10, "output_tokens": 20}}}}))
"#,
            spec = TASK_SPEC
        ),
    );
    sb.edit_json(".modix/shells.json", |v| {
        v["shells"]["codex"] = serde_json::json!({ "preset": "codex" })
    });
    sb.edit_json(".modix/brains.json", |v| {
        v["brains"]["openai"] =
            serde_json::json!({ "provider": "openai", "model": "gpt-5-codex", "api_key_env": "OPENAI_API_KEY" })
    });
    planner_on(&sb, "codex", "openai");
    let out = sb
        .modix()
        .env("OPENAI_API_KEY", "sk-emulator-key-0000000000000000000000")
        .args(["go", "--json", "Fix mean()"])
        .output()
        .unwrap();
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let argv: Vec<String> = serde_json::from_str(
        &std::fs::read_to_string(sb.dir.path().join("home/codex-argv.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(&argv[..3], ["exec", "--json", "--skip-git-repo-check"]);
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(sb.dir.path().join("home/codex-schema.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(schema["additionalProperties"], false, "{schema}");
    assert!(schema.get("$schema").is_none(), "{schema}");
    let sandbox = argv.iter().position(|a| a == "-s").unwrap();
    assert_eq!(argv[sandbox + 1], "read-only");
    assert_eq!(
        argv[argv.iter().position(|a| a == "-m").unwrap() + 1],
        "gpt-5-codex"
    );
}

#[test]
fn doctor_reads_the_emulators_versions() {
    let sb = Sandbox::example();
    fake_claude(&sb, false);
    let out = sb.modix().args(["doctor", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", output_text(&out)));
    let claude = report["shells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "claude")
        .unwrap();
    assert_eq!(claude["version"], "2.1.330");
    assert_eq!(claude["requirement_met"], true);
}
