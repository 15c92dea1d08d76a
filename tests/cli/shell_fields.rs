//! Every field a resolved shell has can be written in `shells.json`, and
//! `modix validate` judges what the schema cannot: regexes compile, JSON
//! pointers are pointers, failure classes exist, rules can match.

use crate::util::{Sandbox, output_text};

/// A shell spelling out every field, as a preset would.
const FULL: &str = r#"{
  "shells": {
    "claude": { "preset": "claude" },
    "codex": { "preset": "codex" },
    "gemini": { "preset": "gemini" },
    "aider": { "preset": "aider" },
    "mine": {
      "binary": "my-agent",
      "version": { "args": ["--version"], "regex": "(\\d+\\.\\d+\\.\\d+)" },
      "requires": ">=1.0.0",
      "tested": ">=1.0.0, <1.5.0",
      "args": ["--message-file", "{prompt_file}", "--model", "{model}"],
      "prompt": "file",
      "output": { "format": "json-lines", "result_pointer": "/text",
                  "select": { "/type": "answer" }, "concat": true },
      "env": ["MY_AGENT_TOKEN"],
      "set_env": { "MY_AGENT_RETRIES": "0" },
      "key_env": "MY_AGENT_KEY",
      "idle": false,
      "failures": [
        { "class": "auth", "pattern": "^401$", "pointer": "/status", "stream": "stdout" },
        { "class": "network", "pattern": "waiting for network", "stop": true },
        { "class": "bad_invocation", "exit_code": 2 }
      ],
      "reason": ["/error/message"],
      "noise": ["^Warning: "],
      "keepalive": ["^Retrying"],
      "usage": { "input_tokens": "/usage/in", "output_tokens": "/usage/out", "cost_usd": "/cost",
                 "turns": "/turns", "model": "/model", "session_id": "/session" }
    }
  }
}
"#;

fn validate(sb: &Sandbox) -> (Option<i32>, String) {
    let out = sb.modix().arg("validate").output().unwrap();
    (out.status.code(), output_text(&out))
}

fn assert_has(text: &str, needles: &[&str]) {
    for n in needles {
        assert!(text.contains(n), "missing {n:?} in:\n{text}");
    }
}

#[test]
fn every_shell_field_is_accepted() {
    let sb = Sandbox::initialized();
    sb.write(".modix/shells.json", FULL);
    let (code, text) = validate(&sb);
    assert_eq!(code, Some(0), "{text}");
}

#[test]
fn a_regex_that_does_not_compile_is_reported_where_it_is() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/shells.json",
        &FULL.replace("\"^Retrying\"", "\"^Retry(ing\""),
    );
    let (code, text) = validate(&sb);
    assert_eq!(code, Some(2), "{text}");
    assert_has(
        &text,
        &[
            ".modix/shells.json:27:21",
            "config::regex",
            "invalid regex",
            "/shells/mine/keepalive/0",
        ],
    );
    // The other shells still load: one mistake does not hide the rest.
    assert!(!text.contains("/shells/claude"), "{text}");
}

/// `validate` refuses exactly what a run's `regex` would: a pattern within
/// its size limit passes, one past it (here for the reverse automaton
/// `regex` also compiles, larger for a Unicode class) is refused with
/// `regex`'s own words, and a version regex needs its group.
#[test]
fn a_regex_is_refused_exactly_when_the_run_could_not_compile_it() {
    let sb = Sandbox::initialized();
    let within = FULL.replace("\"^Retrying\"", "\"\\\\w{209}\"");
    sb.write(".modix/shells.json", &within);
    let (code, text) = validate(&sb);
    assert_eq!(code, Some(0), "{text}");

    sb.write(".modix/shells.json", &within.replace("{209}", "{210}"));
    let (code, text) = validate(&sb);
    assert_eq!(code, Some(2), "{text}");
    assert_has(
        &text,
        &[
            "/shells/mine/keepalive/0",
            "invalid regex: Compiled regex exceeds size limit of 10485760 bytes.",
        ],
    );

    let groupless = FULL.replace(
        "\"(\\\\d+\\\\.\\\\d+\\\\.\\\\d+)\"",
        "\"[0-9]+\\\\.[0-9]+\"",
    );
    assert_ne!(groupless, FULL);
    sb.write(".modix/shells.json", &groupless);
    let (code, text) = validate(&sb);
    assert_eq!(code, Some(2), "{text}");
    assert_has(
        &text,
        &[
            "/shells/mine/version/regex",
            "the version regex has no capture group",
        ],
    );
}

#[test]
fn pointers_must_start_with_a_slash() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/shells.json",
        &FULL
            .replace("\"/error/message\"", "\"error/message\"")
            .replace("\"/usage/out\"", "\"usage.out\""),
    );
    let (code, text) = validate(&sb);
    assert_eq!(code, Some(2), "{text}");
    assert_has(
        &text,
        &[
            "config::pointer",
            "`error/message` is not a JSON pointer",
            "write \"/error/message\"",
            "/shells/mine/reason/0",
            "/shells/mine/usage/output_tokens",
        ],
    );
}

#[test]
fn an_unknown_failure_class_gets_a_suggestion() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/shells.json",
        &FULL.replace("\"class\": \"network\"", "\"class\": \"netwrok\""),
    );
    let (code, text) = validate(&sb);
    assert_eq!(code, Some(2), "{text}");
    assert_has(
        &text,
        &[
            ".modix/shells.json:22:20",
            "config::failure-class",
            "unknown failure class `netwrok`",
            "did you mean `network`?",
        ],
    );
}

#[test]
fn a_rule_that_would_match_every_failure_is_refused() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/shells.json",
        &FULL.replace("\"exit_code\": 2", "\"stream\": \"stderr\""),
    );
    let (code, text) = validate(&sb);
    assert_eq!(code, Some(2), "{text}");
    assert_has(
        &text,
        &["config::failure-rule", "needs `pattern` or `exit_code`"],
    );
}

#[test]
fn the_prompt_must_reach_the_cli() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/shells.json",
        &FULL.replace("\"{prompt_file}\"", "\"{prompt}\""),
    );
    let (code, text) = validate(&sb);
    assert_eq!(code, Some(2), "{text}");
    assert_has(
        &text,
        &[
            "config::prompt",
            "`{prompt}` is used in `args`, but `prompt` is not \"argument\"",
        ],
    );
}

#[test]
fn a_tested_range_must_parse() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/shells.json",
        &FULL.replace(">=1.0.0, <1.5.0", "about 1.4"),
    );
    let (code, text) = validate(&sb);
    assert_eq!(code, Some(2), "{text}");
    assert_has(
        &text,
        &[
            "config::semver",
            "`about 1.4` is not a semver range",
            "/shells/mine/tested",
        ],
    );
}
