//! How a failed agent CLI is told apart, through `go` with emulators that
//! print the real CLIs' failure shapes (on stdout or stderr, as JSON events
//! or plain text, with exit 0 or not): the class, whether it is retried, the
//! CLI's own reason, and the last line of `go` naming it.

use serde_json::json;

use crate::util::{GoResult, Sandbox};

/// What each preset's CLI prints for `--version`, and the brain it runs on.
fn cli(preset: &str) -> (&'static str, serde_json::Value) {
    match preset {
        "claude" => (
            "2.1.197 (Claude Code)",
            json!({"provider": "anthropic", "model": "sonnet", "api_key_env": "ANTHROPIC_API_KEY"}),
        ),
        "codex" => (
            "codex-cli 0.169.0",
            json!({"provider": "openai", "model": "gpt-5-codex", "api_key_env": "OPENAI_API_KEY"}),
        ),
        _ => (
            "0.61.0",
            json!({"provider": "google", "model": "gemini-2.5-flash", "api_key_env": "GEMINI_API_KEY"}),
        ),
    }
}

/// The example with its planner on `preset`, whose CLI is an emulator
/// printing `stdout` and `stderr` and exiting with `code`.
fn emulated(preset: &str, stdout: &str, stderr: &str, code: i32) -> Sandbox {
    let sb = Sandbox::example();
    let (version, brain) = cli(preset);
    let dir = sb.dir.path().join("emulated");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("stdout"), stdout).unwrap();
    std::fs::write(dir.join("stderr"), stderr).unwrap();
    sb.fake_bin(
        preset,
        &format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo '{version}'; exit 0; fi\n\
             cat > /dev/null\ncat {d}/stdout\ncat {d}/stderr >&2\nexit {code}\n",
            d = dir.display()
        ),
    );
    sb.edit_json(".modix/shells.json", |v| {
        v["shells"][preset] = json!({ "preset": preset })
    });
    sb.edit_json(".modix/brains.json", |v| v["brains"]["emulated"] = brain);
    sb.edit_json(".modix/agents.json", |v| {
        let planner = &mut v["agents"]["planner"];
        planner["shell"] = preset.into();
        planner["brain"] = "emulated".into();
        planner["manifest"]
            .as_object_mut()
            .unwrap()
            .remove("requires");
    });
    sb
}

/// A bogus key for every preset's brain: nothing is called with it.
fn go(sb: &Sandbox, args: &[&str]) -> std::process::Output {
    let key = "sk-emulated-bogus-key-000000000000000000";
    sb.modix()
        .env("ANTHROPIC_API_KEY", key)
        .env("OPENAI_API_KEY", key)
        .env("GEMINI_API_KEY", key)
        .args(args)
        .output()
        .unwrap()
}

/// A run failed at its planner: even with `-q`, the one line `go` prints
/// says why (the class and the CLI's own words), not only where it ended;
/// `--json`'s `run_finished` carries the same reason.
#[test]
fn the_last_line_of_a_failed_run_names_the_failure_even_quiet() {
    let stdout = concat!(
        r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"Not logged in · Please run /login"}]},"error":"authentication_failed"}"#,
        "\n",
        r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":null,"result":"Not logged in · Please run /login"}"#,
        "\n"
    );
    let sb = emulated("claude", stdout, "", 1);
    let out = go(&sb, &["-q", "go", "Fix mean()"]);
    assert_eq!(out.status.code(), Some(1));
    let printed = String::from_utf8_lossy(&out.stdout);
    let first = printed.lines().next().unwrap_or_default();
    assert!(
        first.contains("failed: ended in FAILED from PLANNING: agent failed (auth): Not logged in · Please run /login"),
        "{printed}"
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let r = GoResult::parse(&go(&sb, &["go", "--json", "Fix mean()"]));
    assert_eq!(r.summary["type"], "run_finished");
    assert_eq!(
        r.summary["reason"],
        "PLANNING: agent failed (auth): Not logged in · Please run /login"
    );
}

/// Failures no retry fixes, in each CLI's shape: a spent quota or credit
/// (a 429 from OpenAI), a prompt over the model's context window, a model
/// that does not exist (only the result's status says so), an expired
/// login. Each is its permanent class, caught to FAILED after one
/// invocation — not retried as a rate limit, nor sent round the executor's
/// loop as an agent error — with the CLI's own reason.
#[test]
fn failures_no_retry_fixes_are_told_apart_and_not_retried() {
    let claude_result = |status: &str, error: &str, text: &str| {
        format!(
            "{}\n{}\n",
            json!({"type": "assistant", "message": {"model": "<synthetic>", "content": [{"type": "text", "text": text}]}, "error": error}),
            json!({"type": "result", "subtype": "success", "is_error": true, "api_error_status": serde_json::from_str::<serde_json::Value>(status).unwrap(), "result": text})
        )
    };
    let codex_failed = |message: &str| {
        format!(
            "{}\n{}\n{}\n",
            json!({"type": "turn.started"}),
            json!({"type": "error", "message": message}),
            json!({"type": "turn.failed", "error": {"message": message}})
        )
    };
    let cases: Vec<(&str, String, &str, i32, &str, &str)> = vec![
        (
            "claude",
            claude_result("400", "billing_error", "Credit balance is too low"),
            "",
            1,
            "budget_exceeded",
            "Credit balance is too low",
        ),
        (
            "claude",
            claude_result("400", "invalid_request", "Prompt is too long"),
            "",
            1,
            "bad_invocation",
            "Prompt is too long",
        ),
        (
            "claude",
            format!(
                "{}\n",
                json!({"type": "result", "subtype": "success", "is_error": true, "api_error_status": 404,
                       "result": "There's an issue with the selected model (claude-x). It may not exist or you may not have access to it."})
            ),
            "",
            1,
            "not_found",
            "issue with the selected model",
        ),
        (
            "claude",
            format!(
                "{}\n",
                json!({"type": "result", "subtype": "success", "is_error": true,
                       "result": "OAuth token has expired. Please obtain a new token or refresh your existing token."})
            ),
            "",
            0,
            "auth",
            "OAuth token has expired",
        ),
        (
            "codex",
            codex_failed("Quota exceeded. Check your plan and billing details."),
            "",
            1,
            "budget_exceeded",
            "Quota exceeded",
        ),
        (
            "codex",
            codex_failed(
                r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}"#,
            ),
            "",
            1,
            "budget_exceeded",
            "exceeded your current quota",
        ),
        (
            "codex",
            codex_failed(
                "Codex ran out of room in the model's context window. Start a new thread or clear earlier history before retrying.",
            ),
            "",
            1,
            "bad_invocation",
            "context window",
        ),
        (
            "gemini",
            format!(
                "{}\n",
                json!({"type": "result", "status": "error", "error": {"type": "unknown",
                       "message": "[API Error: You have exhausted your daily quota on this model.]"}})
            ),
            "",
            1,
            "budget_exceeded",
            "daily quota",
        ),
        (
            "gemini",
            String::new(),
            "[API Error: models/gemini-9-pro is not found for API version v1beta, or is not supported for generateContent.]\n",
            1,
            "not_found",
            "is not found",
        ),
        (
            "gemini",
            format!(
                "{}\n",
                json!({"type": "result", "status": "error", "error": {"type": "unknown",
                       "message": "[API Error: The input token count (1500000) exceeds the maximum number of tokens allowed (1048576).]"}})
            ),
            "",
            1,
            "bad_invocation",
            "exceeds the maximum number of tokens",
        ),
    ];
    for (preset, stdout, stderr, code, class, reason) in cases {
        let sb = emulated(preset, &stdout, stderr, code);
        let r = GoResult::parse(&go(&sb, &["go", "--json", "Fix mean()"]));
        let case = format!("{preset} {class} {reason}: {}", r.stderr);
        assert_eq!(r.code, Some(1), "{case}");
        assert_eq!(
            r.path()[1],
            format!("PLANNING -catch:{class}-> FAILED"),
            "{case}"
        );
        let said = r.transitions[1]["reason"].as_str().unwrap();
        assert!(
            said.contains(&format!("agent failed ({class}): ")) && said.contains(reason),
            "{case}: {said}"
        );
        let runs = sb.runs();
        assert_eq!(runs[0]["invocations"], 1, "{case}: retried");
    }
}

/// Where a CLI's reason sits in a JSON document printed over several lines
/// (Gemini's `-o json` error on stderr), or in an API's error body passed
/// on as a message's text (Codex), the last line of `go` gives its own
/// words — not a closing brace, nor the raw body.
#[test]
fn a_reason_inside_a_pretty_printed_or_quoted_json_error_is_its_message() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent-clis");
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let cases = [
        (
            "gemini",
            String::new(),
            read("gemini-nokey-json/stderr.txt"),
            41,
            "agent failed (auth): Please set an Auth method",
        ),
        (
            "codex",
            read("mock-codex-400-other/stdout.txt"),
            read("mock-codex-400-other/stderr.txt"),
            1,
            "Invalid value for 'input'.",
        ),
    ];
    for (preset, stdout, stderr, code, reason) in cases {
        let sb = emulated(preset, &stdout, &stderr, code);
        let out = go(&sb, &["-q", "go", "Fix mean()"]);
        assert_eq!(out.status.code(), Some(1), "{preset}");
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(printed.contains(reason), "{preset}: {printed}");
        assert!(!printed.trim_end().ends_with('}'), "{preset}: {printed}");
    }
}

/// A stream that ends in the middle of its answer's line (the CLI killed,
/// its output cut) says so, rather than that no line was JSON.
#[test]
fn a_stream_cut_in_the_middle_of_its_answer_says_so() {
    let stdout = concat!(
        r#"{"type":"system","subtype":"init","session_id":"s"}"#,
        "\n",
        r#"{"type":"result","subtype":"success","is_error":false,"result":"{\"title\": \"x\", \"summ"#
    );
    let sb = emulated("claude", stdout, "", 0);
    let r = GoResult::parse(&go(&sb, &["go", "--json", "Fix mean()"]));
    let reasons: Vec<String> = r
        .events
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_owned))
        .collect();
    let all = reasons.join("\n");
    assert!(
        all.contains(r#"no line of stdout is a JSON object with `/type` = "result""#)
            && all.contains("cut short"),
        "{all}"
    );
}
