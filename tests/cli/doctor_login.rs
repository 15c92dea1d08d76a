//! `modix doctor` with fake agent CLIs: a CLI's own login stands in for a
//! missing key, every known CLI on PATH is listed, a version outside the
//! preset's tested range is a warning, `--deep` checks each flag against
//! the CLI's own `--help`, and versions are cached by the binary.

use crate::util::{Sandbox, output_text};

/// A fake `claude`: its version, its `auth status` answer (JSON, exit code),
/// and a `--help` listing `help_flags`. Each `--version` call is counted in
/// `$HOME/claude-version-calls`.
fn fake_claude(sb: &Sandbox, version: &str, logged_in: bool, help_flags: &str) {
    let (json, code) = if logged_in {
        (
            r#"{"loggedIn": true, "authMethod": "claude.ai", "apiProvider": "firstParty"}"#,
            0,
        )
    } else {
        (
            r#"{"loggedIn": false, "authMethod": "none", "apiProvider": "firstParty"}"#,
            1,
        )
    };
    sb.fake_bin(
        "claude",
        &format!(
            "#!/bin/sh\ncase \"$1 $2\" in\n  '--version '*) echo x >> \"$HOME/claude-version-calls\"; echo '{version} (Claude Code)'; exit 0;;\n  'auth status') echo '{json}'; exit {code};;\n  '--help '*) printf '%s\\n' 'Usage: claude [options]' {help_flags}; exit 0;;\nesac\nexit 1\n"
        ),
    );
}

/// Every flag the claude preset passes, as its help lists them.
const CLAUDE_HELP: &str = "'  -p, --print' '  --output-format <format>' '  --verbose' '  --model <model>' '  --append-system-prompt <prompt>' '  --permission-mode <mode> (choices: \"acceptEdits\", \"default\", \"plan\")' '  --allowedTools, --allowed-tools <tools...>' '  --max-budget-usd <amount>' '  --json-schema <schema>' '  --no-session-persistence'";

fn doctor_json(
    sb: &Sandbox,
    args: &[&str],
    envs: &[(&str, &str)],
) -> (Option<i32>, serde_json::Value) {
    let mut cmd = sb.modix();
    cmd.args(["doctor", "--json"]).args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", output_text(&out)));
    (out.status.code(), v)
}

fn find<'a>(
    report: &'a serde_json::Value,
    list: &str,
    key: &str,
    name: &str,
) -> &'a serde_json::Value {
    report[list]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x[key] == name)
        .unwrap_or_else(|| panic!("no {name} in {list}: {report}"))
}

#[test]
fn a_claude_login_stands_in_for_the_key() {
    let sb = Sandbox::new();
    fake_claude(&sb, "2.1.197", true, CLAUDE_HELP);
    sb.modix().arg("init").assert().success();
    let (code, report) = doctor_json(&sb, &[], &[]);
    assert_eq!(code, Some(0), "{report}");
    let planner = find(&report, "agents", "id", "planner");
    assert_eq!(planner["ready"], true, "{report}");
    assert_eq!(
        planner["auth"]["how"],
        "logged in (`claude auth status`: claude.ai)"
    );
    let claude = find(&report, "shells", "name", "claude");
    assert_eq!(claude["login"]["ok"], true);
    // People see how it is signed in.
    let out = sb.modix().arg("doctor").output().unwrap();
    let text = output_text(&out);
    assert!(
        text.contains("ready (logged in (`claude auth status`: claude.ai))"),
        "{text}"
    );
    assert!(text.contains("$ANTHROPIC_API_KEY is not set"), "{text}");
}

#[test]
fn an_oauth_token_or_a_cloud_provider_stands_in_for_the_key() {
    let sb = Sandbox::new();
    fake_claude(&sb, "2.1.197", false, CLAUDE_HELP);
    sb.modix().arg("init").assert().success();
    let token = "sk-ant-oat01-NEVER-PRINTED-0000000000";
    let out = sb
        .modix()
        .args(["doctor", "--json"])
        .env("CLAUDE_CODE_OAUTH_TOKEN", token)
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains(token));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let planner = find(&report, "agents", "id", "planner");
    assert_eq!(planner["auth"]["how"], "$CLAUDE_CODE_OAUTH_TOKEN is set");
    // No login asked for: a variable already covers it.
    assert_eq!(
        find(&report, "shells", "name", "claude")["login"],
        serde_json::Value::Null
    );

    let (code, report) = doctor_json(&sb, &[], &[("CLAUDE_CODE_USE_BEDROCK", "1")]);
    assert_eq!(code, Some(0), "{report}");
    let how = &find(&report, "agents", "id", "planner")["auth"]["how"];
    assert_eq!(
        how,
        "$CLAUDE_CODE_USE_BEDROCK is on (the provider's own credentials)"
    );
}

#[test]
fn codex_and_gemini_logins_count() {
    let sb = Sandbox::new();
    sb.fake_bin(
        "codex",
        "#!/bin/sh\ncase \"$1 $2\" in\n  '--version '*) echo 'codex-cli 0.169.0';;\n  'login status') echo 'Logged in using ChatGPT' >&2;;\n  *) exit 1;;\nesac\n",
    );
    sb.fake_bin(
        "gemini",
        "#!/bin/sh\n[ \"$1\" = --version ] && echo 0.61.0\n",
    );
    sb.modix()
        .args(["init", "--shell", "codex"])
        .assert()
        .success();
    let (code, report) = doctor_json(&sb, &[], &[]);
    assert_eq!(code, Some(0), "{report}");
    let planner = find(&report, "agents", "id", "planner");
    assert_eq!(planner["auth"]["how"], "logged in (`codex login status`)");

    sb.modix()
        .args(["init", "--force", "--shell", "gemini"])
        .assert()
        .success();
    let (code, report) = doctor_json(&sb, &[], &[]);
    assert_eq!(code, Some(1), "{report}");
    let problem = find(&report, "agents", "id", "planner")["problems"][0]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        problem.contains("`gemini` is not logged in (no auth chosen in ~/.gemini/settings.json)"),
        "{problem}"
    );
    sb.write(
        "../home/.gemini/settings.json",
        r#"{"security": {"auth": {"selectedType": "oauth-personal"}}}"#,
    );
    let (code, report) = doctor_json(&sb, &[], &[]);
    assert_eq!(code, Some(0), "{report}");
    let (code, _) = doctor_json(&sb, &[], &[("GOOGLE_GENAI_USE_VERTEXAI", "true")]);
    assert_eq!(code, Some(0));
}

#[test]
fn every_known_cli_on_path_is_listed() {
    let sb = Sandbox::new();
    fake_claude(&sb, "2.1.197", true, CLAUDE_HELP);
    sb.fake_bin("aider", "#!/bin/sh\necho 'aider 0.86.1'\n");
    sb.modix().arg("init").assert().success();
    // A project with only a claude shell still hears of aider.
    sb.write(
        ".modix/shells.json",
        r#"{"shells": {"claude": {"preset": "claude"}}}"#,
    );
    let (_, report) = doctor_json(&sb, &[], &[]);
    let clis: Vec<(&str, &str)> = report["clis"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["version"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        clis,
        [("claude", "2.1.197"), ("aider", "0.86.1")],
        "{report}"
    );
    assert_eq!(report["clis"][0]["shells"], serde_json::json!(["claude"]));
    assert_eq!(report["clis"][1]["shells"], serde_json::json!([]));
    let out = sb.modix().arg("doctor").output().unwrap();
    assert!(output_text(&out).contains("Agent CLIs on PATH"));
}

#[test]
fn a_version_outside_the_tested_range_is_a_warning() {
    let sb = Sandbox::new();
    fake_claude(&sb, "2.4.0", true, CLAUDE_HELP);
    sb.modix().arg("init").assert().success();
    let (code, report) = doctor_json(&sb, &[], &[]);
    assert_eq!(code, Some(0), "a warning does not block: {report}");
    let claude = find(&report, "shells", "name", "claude");
    assert_eq!(claude["in_tested_range"], false);
    let warning = claude["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with("version 2.4.0 is outside `>=2.1.0, <2.2.0`"),
        "{warning}"
    );
    assert!(warning.contains("modix doctor --deep"), "{warning}");
}

#[test]
fn deep_checks_each_flag_against_the_clis_own_help() {
    let sb = Sandbox::new();
    fake_claude(&sb, "2.1.197", true, CLAUDE_HELP);
    sb.modix().arg("init").assert().success();
    let (code, report) = doctor_json(&sb, &["--deep"], &[]);
    assert_eq!(code, Some(0), "{report}");
    let flags = &find(&report, "shells", "name", "claude")["flags"];
    assert_eq!(flags["help"], "claude --help");
    assert_eq!(flags["unknown"], serde_json::json!([]));
    // Known to be accepted although --help leaves it out.
    assert_eq!(flags["hidden"], serde_json::json!(["--max-turns"]));
    assert!(flags["checked"].as_array().unwrap().len() >= 10, "{flags}");

    // A version that dropped a flag and a permission mode: not ready, and which.
    let without = CLAUDE_HELP
        .replace("'  --no-session-persistence'", "")
        .replace("\"default\", ", "");
    fake_claude(&sb, "2.1.197", true, &without);
    let (code, report) = doctor_json(&sb, &["--deep"], &[]);
    assert_eq!(code, Some(1), "{report}");
    let claude = find(&report, "shells", "name", "claude");
    assert_eq!(
        claude["flags"]["unknown"],
        serde_json::json!(["--no-session-persistence", "permission mode `default`"])
    );
    let problem = claude["problem"].as_str().unwrap();
    assert!(
        problem.starts_with("`claude --help` does not list --no-session-persistence"),
        "{problem}"
    );
    // Without --deep, the help is not read.
    let (_, report) = doctor_json(&sb, &[], &[]);
    assert_eq!(
        find(&report, "shells", "name", "claude")["flags"],
        serde_json::Value::Null
    );
}

#[test]
fn versions_are_cached_by_the_binary() {
    let sb = Sandbox::new();
    fake_claude(&sb, "2.1.197", true, CLAUDE_HELP);
    sb.modix().arg("init").assert().success();
    let calls = sb.dir.path().join("home/claude-version-calls");
    let _ = std::fs::remove_file(&calls);
    let count = || std::fs::read_to_string(&calls).map_or(0, |s| s.lines().count());
    doctor_json(&sb, &[], &[]);
    let first = count();
    assert!(first >= 1);
    doctor_json(&sb, &[], &[]);
    assert_eq!(count(), first, "the second doctor used the cache");
    assert!(sb.dir.path().join("home/cache/versions.json").is_file());
    // Another binary at the same path (here: another size) is asked again.
    fake_claude(&sb, "2.1.198", true, CLAUDE_HELP);
    let (_, report) = doctor_json(&sb, &[], &[]);
    assert!(count() > first);
    assert_eq!(
        find(&report, "shells", "name", "claude")["version"],
        "2.1.198"
    );
}
