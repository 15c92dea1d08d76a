//! `modix doctor` with fake agent CLIs on PATH: versions, requirements, keys.

use crate::util::{Sandbox, output_text};

const FAKE_CLAUDE: &str = "#!/bin/sh\nif [ \"$1\" = \"--version\" ]; then echo '2.0.14 (Claude Code)'; exit 0; fi\nexit 1\n";

fn doctor_json(sb: &Sandbox, envs: &[(&str, &str)]) -> (Option<i32>, serde_json::Value, String) {
    let mut cmd = sb.modix();
    cmd.args(["doctor", "--json"]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = output_text(&out);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {text}"));
    (out.status.code(), v, text)
}

fn shell<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["shells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()
}

#[test]
fn found_cli_with_version_meeting_the_requirement() {
    let sb = Sandbox::new();
    sb.fake_bin("claude", FAKE_CLAUDE);
    sb.modix().arg("init").assert().success();
    sb.edit_json(".modix/shells.json", |v| {
        v["shells"]["claude"]["requires"] = ">=1.0.0".into()
    });
    let (code, report, text) =
        doctor_json(&sb, &[("ANTHROPIC_API_KEY", "sk-ant-secret-value-1234")]);
    let claude = shell(&report, "claude");
    assert_eq!(claude["version"], "2.0.14");
    assert_eq!(claude["version_raw"], "2.0.14");
    assert_eq!(claude["requirement_met"], true);
    assert!(claude["path"].as_str().unwrap().ends_with("bin/claude"));
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(report["ready"], true);
    assert!(
        !text.contains("sk-ant-secret-value-1234"),
        "key value leaked"
    );
}

#[test]
fn unmet_requirement_says_why() {
    let sb = Sandbox::new();
    sb.fake_bin("claude", FAKE_CLAUDE);
    sb.modix().arg("init").assert().success();
    sb.edit_json(".modix/shells.json", |v| {
        v["shells"]["claude"]["requires"] = ">=3".into()
    });
    let (code, report, _) = doctor_json(&sb, &[("ANTHROPIC_API_KEY", "k")]);
    let claude = shell(&report, "claude");
    assert_eq!(claude["requirement_met"], false);
    assert_eq!(
        claude["problem"],
        "version 2.0.14 does not satisfy `>=3`: install a matching version or change `requires`"
    );
    assert_eq!(code, Some(1));

    let out = sb
        .modix()
        .arg("doctor")
        .env("ANTHROPIC_API_KEY", "k")
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(text.contains("does not satisfy `>=3`"), "{text}");
    assert!(
        text.contains("Not ready: workflow `plan_execute_test` needs"),
        "{text}"
    );
}

#[test]
fn missing_binary_is_reported_not_found() {
    let sb = Sandbox::initialized();
    let (code, report, _) = doctor_json(&sb, &[("ANTHROPIC_API_KEY", "k")]);
    let codex = shell(&report, "codex");
    assert_eq!(codex["path"], serde_json::Value::Null);
    assert_eq!(codex["problem"], "`codex` not found on PATH");
    assert_eq!(
        code,
        Some(1),
        "claude is not installed either, so the workflow is not ready"
    );
    let out = sb.modix().arg("doctor").output().unwrap();
    assert!(output_text(&out).contains("not found"));
}

#[test]
fn key_presence_is_reported_and_the_value_never_printed() {
    let sb = Sandbox::new();
    sb.fake_bin("claude", FAKE_CLAUDE);
    sb.modix().arg("init").assert().success();
    let (code, report, _) = doctor_json(&sb, &[]);
    let brain = report["brains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "anthropic")
        .unwrap();
    assert_eq!(brain["key_present"], false);
    assert_eq!(code, Some(1));
    let planner = report["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "planner")
        .unwrap();
    // No key, and the CLI's own login (`claude auth status`) says no either.
    let problem = planner["problems"][0].as_str().unwrap();
    assert!(
        problem.starts_with(
            "brain `anthropic`: $ANTHROPIC_API_KEY is not set and `claude` is not logged in"
        ),
        "{problem}"
    );
    assert!(problem.contains("run `claude auth login`"), "{problem}");

    let secret = "sk-ant-api03-very-secret-value";
    let out = sb
        .modix()
        .arg("doctor")
        .env("ANTHROPIC_API_KEY", secret)
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("$ANTHROPIC_API_KEY is set"), "{text}");
    assert!(!text.contains(secret));
    let (_, report, text) = doctor_json(&sb, &[("ANTHROPIC_API_KEY", secret)]);
    assert!(!text.contains(secret));
    assert_eq!(report["brains"][0]["key_present"], true);
}

#[test]
fn doctor_on_broken_config_exits_2() {
    let sb = Sandbox::initialized();
    sb.write(".modix/agents.json", "{");
    let out = sb.modix().arg("doctor").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = output_text(&out);
    assert!(
        text.contains(".modix/agents.json:1:") && text.contains("invalid JSON"),
        "{text}"
    );
}

/// Version managers (Volta, mise) link every CLI to one program that acts
/// as the name it is called by: each name's version is its own, cached or not.
#[test]
fn clis_linked_to_one_multi_call_program_keep_their_own_versions() {
    let sb = Sandbox::new();
    let shim = sb.dir.path().join("multicall");
    crate::util::write_file(
        &shim,
        "#!/bin/sh\n[ \"$1\" = --version ] || exit 1\ncase \"$(basename \"$0\")\" in\n  claude) echo '2.0.14 (Claude Code)' ;;\n  gemini) echo '0.61.0' ;;\nesac\n",
    );
    crate::util::make_executable(&shim);
    std::fs::create_dir_all(sb.bin()).unwrap();
    for name in ["claude", "gemini"] {
        std::os::unix::fs::symlink(&shim, sb.bin().join(name)).unwrap();
    }
    sb.modix().arg("init").assert().success();
    sb.edit_json(".modix/shells.json", |v| {
        v["shells"]["claude"]["requires"] = ">=1.0.0".into()
    });
    // The second reads what the first cached.
    for round in 1..=2 {
        let (code, report, text) =
            doctor_json(&sb, &[("ANTHROPIC_API_KEY", "sk-ant-secret-value-1234")]);
        let claude = shell(&report, "claude");
        assert_eq!(claude["version"], "2.0.14", "round {round}: {text}");
        assert_eq!(claude["requirement_met"], true, "round {round}: {text}");
        assert_eq!(code, Some(0), "round {round}: {text}");
    }
}
