//! What users of cargo, git and gh expect: completions, a man page,
//! examples and a description for every option in `--help`, bare `modix`
//! printing help, and a JSON error object from every `--json` command.

use crate::util::{Sandbox, output_text};

#[test]
fn completions_for_each_shell() {
    let sb = Sandbox::new();
    for (shell, marker) in [
        ("bash", "complete -F _modix"),
        ("zsh", "#compdef modix"),
        ("fish", "complete -c modix"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let out = sb.modix().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}: {}", output_text(&out));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(marker), "{shell}: {text}");
        assert!(text.contains("history"), "{shell} completes subcommands");
    }
    let out = sb.modix().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn man_page_on_stdout() {
    let sb = Sandbox::new();
    let out = sb.modix().arg("man").output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(".ie") || text.contains(".TH modix 1"),
        "{text}"
    );
    for needle in ["completions", "history", "\\-\\-color"] {
        assert!(text.contains(needle), "man page lacks {needle}");
    }
}

#[test]
fn bare_modix_prints_help_and_succeeds() {
    let sb = Sandbox::new();
    let out = sb.modix().output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Usage: modix") && text.contains("Commands:"),
        "{text}"
    );
}

const SUBCOMMANDS: [&[&str]; 14] = [
    &["fsm"],
    &["init"],
    &["validate"],
    &["doctor"],
    &["fsm", "list"],
    &["fsm", "show"],
    &["fsm", "check"],
    &["fsm", "graph"],
    &["go"],
    &["resume"],
    &["history"],
    &["completions"],
    &["man"],
    &[],
];

#[test]
fn every_help_has_examples_and_every_option_a_description() {
    let sb = Sandbox::new();
    // clap's option lines: `  -v, --verbose`, `      --json`, `  <RUN>`, `  [RUN]`.
    let option = regex::Regex::new(r"^  (-\w, |    )?(--[\w-]+|<[\w-]+>|\[[\w-]+\])").unwrap();
    for cmd in SUBCOMMANDS {
        let out = sb.modix().args(cmd).arg("-h").output().unwrap();
        assert!(out.status.success(), "{cmd:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains("Examples:\n  modix"),
            "{cmd:?} has no examples:\n{text}"
        );
        for line in text.lines().filter(|l| option.is_match(l)) {
            // `  --flag <VALUE>  What it does`: a description after the spec.
            let spec = option.find(line).unwrap().end();
            let rest = &line[spec..];
            let described = rest.split("  ").skip(1).any(|part| !part.trim().is_empty());
            assert!(described, "{cmd:?}: `{line}` has no description");
        }
    }
}

/// `modix ARGS` must fail with `code` and print one JSON error object on stdout.
fn json_error(sb: &Sandbox, args: &[&str], code: i32) -> serde_json::Value {
    let out = sb.modix().args(args).output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {text}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: stdout is not one JSON value ({e}): {text}"));
    assert_eq!(v["schema_version"], 1, "{v}");
    let e = &v["error"];
    assert!(
        e["code"].is_string() && e["message"].is_string(),
        "{args:?}: {v}"
    );
    assert_eq!(e["exit_code"], code, "{v}");
    assert!(e.get("diagnostics").is_some(), "{v}");
    v
}

#[test]
fn every_json_command_fails_with_a_json_error_object() {
    let sb = Sandbox::initialized();
    // A broken project.
    sb.write(
        ".modix/brains.json",
        "{ \"brains\": { \"x\": { \"provider\": 1 } } }\n",
    );
    for args in [
        &["doctor", "--json"][..],
        &["go", "--json", "Fix it"],
        &["resume", "--json"],
    ] {
        let v = json_error(&sb, args, 2);
        assert_eq!(v["error"]["code"], "config", "{args:?}: {v}");
        assert!(
            v["error"]["diagnostics"]["errors"].as_u64() > Some(0),
            "{v}"
        );
    }
    let v = json_error(&sb, &["validate", "--json"], 2);
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["code"], "config");
    assert!(
        v["error"]["diagnostics"]["diagnostics"]
            .as_array()
            .is_some_and(|d| !d.is_empty())
    );

    // Unknown runs and machines.
    let sb = Sandbox::example();
    sb.go_json("Fix mean()");
    for args in [
        &["history", "--json", "ZZZZ"][..],
        &["history", "--json", "last~5"],
        &["history", "--json", "last", "--invocation", "99"],
        &["resume", "--json", "ZZZZ"],
        &["fsm", "show", "nope", "--json"],
        &["fsm", "check", "nope", "--json"],
    ] {
        json_error(&sb, args, 2);
    }
    // A broken FSM file: the findings and the error object.
    sb.write(".modix/fsm/bad.toml", "id = \"bad\"\n");
    let v = json_error(&sb, &["fsm", "check", "--json"], 2);
    assert!(v["machines"].is_array(), "{v}");
    // Outside a project.
    let sb = Sandbox::new();
    let v = json_error(&sb, &["history", "--json"], 2);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a modix project")
    );
    // A usage error clap finds.
    let v = json_error(&sb, &["history", "--json", "--limit", "many"], 2);
    assert_eq!(v["error"]["code"], "usage");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("many"),
        "{v}"
    );
}

#[test]
fn an_argument_that_is_not_utf8_is_a_usage_error_not_a_panic() {
    use std::os::unix::ffi::OsStrExt as _;
    let sb = Sandbox::initialized();
    let latin1 = std::ffi::OsStr::from_bytes(b"Fix the caf\xe9 menu");
    for json in [false, true] {
        let mut cmd = sb.modix();
        cmd.args(["go", "--dry-run"]).arg(latin1);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
        let text = output_text(&out);
        assert!(text.contains("invalid UTF-8"), "{text}");
        assert!(!text.contains("panicked"), "{text}");
    }
}

#[test]
fn an_environment_variable_modix_cannot_read_is_said_not_ignored_silently() {
    let sb = Sandbox::initialized();
    let out = sb
        .modix()
        .env("MODIX_LOG", "verbose")
        .env("MODIX_CONTEXT_MODE", "Shared")
        .arg("validate")
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("`verbose` is not a value MODIX_LOG takes; it is ignored")
            && text.contains("set it to one of: error, warn, info, debug, trace"),
        "{text}"
    );
    // Any case of a value it takes is that value.
    assert!(!text.contains("MODIX_CONTEXT_MODE"), "{text}");
}

/// A project that has recorded no run yet: every command that takes a RUN
/// says there is no such run (exit 2; one JSON error object with
/// `--json`), `status` lists none (as JSON with `--json`), and none of
/// them creates the run database as a side effect.
#[test]
fn every_run_command_in_a_project_without_runs_says_no_such_run() {
    let sb = Sandbox::initialized();
    for args in [
        &["approve", "last", "--json"][..],
        &["reject", "last", "--note", "no", "--json"],
        &["answer", "last", "approved", "--json"],
        &["fork", "last", "--at", "1", "--json"],
        &["pending", "list", "last", "--json"],
        &["status", "last", "--json"],
        &["history", "last", "--json"],
        &["apply", "last", "--json"],
        &["resume", "last", "--json"],
    ] {
        let v = json_error(&sb, args, 2);
        assert_eq!(v["error"]["code"], "not_found", "{args:?}: {v}");
    }
    for args in [
        &["stop", "last"][..],
        &["pending", "add", "last", "hello"],
        &["status", "01ABCDEF"],
        &["diff", "last"],
    ] {
        let out = sb.modix().args(args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            output_text(&out)
        );
        assert!(
            output_text(&out).contains("no run matches"),
            "{args:?}: {}",
            output_text(&out)
        );
    }
    let out = sb.modix().args(["status", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status --json is JSON ({e}): {}", output_text(&out)));
    assert_eq!(v["runs"], serde_json::json!([]), "{v}");
    assert!(!sb.root().join(".modix/modix.db").exists());
}

/// A usage error clap finds, with `--json`: the whole of what clap says
/// (the missing argument, the values it takes) once, and its tip in the
/// help — not only its first line, nor that line twice.
#[test]
fn a_usage_error_as_json_says_what_clap_says_once() {
    let sb = Sandbox::new();
    let v = json_error(&sb, &["approve", "--json"], 2);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("<RUN>"), "{v}");
    let v = json_error(&sb, &["history", "--json", "--status", "bogus"], 2);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("possible values: running"), "{v}");
    let v = json_error(&sb, &["history", "--json", "--lmit", "3"], 2);
    assert!(
        v["error"]["help"].as_str().unwrap().contains("'--limit'"),
        "{v}"
    );
    let v = json_error(&sb, &["history", "--json", "--limit", "-1"], 2);
    let message = v["error"]["message"].as_str().unwrap();
    assert_eq!(message, "unexpected argument '-1' found", "{v}");
}
