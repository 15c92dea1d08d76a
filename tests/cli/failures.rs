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
