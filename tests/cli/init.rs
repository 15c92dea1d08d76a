//! `modix init`: scaffolding, idempotence, --force, and binding to what is installed.

use crate::util::{Sandbox, output_text};

const FILES: [&str; 12] = [
    ".modix/version.json",
    ".modix/shells.json",
    ".modix/brains.json",
    ".modix/agents.json",
    ".modix/runtimes.json",
    ".modix/projects.json",
    ".modix/state.json",
    ".modix/.gitignore",
    ".modix/fsm/README.md",
    ".modix/prompts/planner.md",
    ".modix/prompts/executor.md",
    ".modix/prompts/tester.md",
];

#[test]
fn init_in_an_empty_dir_writes_every_file_and_validates() {
    let sb = Sandbox::new();
    let out = sb.modix().arg("init").output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let text = output_text(&out);
    for f in FILES {
        assert!(sb.root().join(f).is_file(), "{f} missing");
        assert!(
            text.contains(&format!("created {f}")),
            "{f} not reported:\n{text}"
        );
    }
    // The warning goes to stderr, saying plainly what was bound anyway.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: no agent CLI found on PATH")
            && stderr.contains("bound to `claude` anyway")
            && stderr.contains("--shell NAME"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("no agent CLI found"));
    sb.modix().arg("validate").assert().success();
}

#[test]
fn init_again_changes_nothing_and_says_so() {
    let sb = Sandbox::initialized();
    sb.write(".modix/projects.json", "{\"name\": \"mine\"}\n");
    let out = sb.modix().arg("init").output().unwrap();
    assert!(out.status.success());
    let text = output_text(&out);
    assert!(text.contains("kept    .modix/projects.json"), "{text}");
    assert!(text.contains("Nothing to do"), "{text}");
    assert_eq!(sb.read(".modix/projects.json"), "{\"name\": \"mine\"}\n");
}

#[test]
fn init_force_rewrites_existing_files() {
    let sb = Sandbox::initialized();
    sb.write(".modix/shells.json", "broken");
    let out = sb.modix().args(["init", "--force"]).output().unwrap();
    assert!(out.status.success());
    assert!(output_text(&out).contains("rewrote .modix/shells.json"));
    assert!(
        sb.read(".modix/shells.json")
            .contains("\"preset\": \"claude\"")
    );
    sb.modix().arg("validate").assert().success();
}

#[test]
fn init_binds_agents_to_the_cli_found_on_path() {
    let sb = Sandbox::new();
    sb.fake_bin("codex", "#!/bin/sh\necho 'codex-cli 0.169.0'\n");
    let out = sb.modix().arg("init").output().unwrap();
    let text = output_text(&out);
    assert!(
        text.contains("Bound the planner, executor and tester to `codex`"),
        "{text}"
    );
    let agents: serde_json::Value = serde_json::from_str(&sb.read(".modix/agents.json")).unwrap();
    assert_eq!(agents["agents"]["planner"]["shell"], "codex");
    assert_eq!(agents["agents"]["planner"]["brain"], "openai");
}

#[test]
fn init_shell_flag_wins_and_unknown_shell_is_a_usage_error() {
    let sb = Sandbox::new();
    sb.modix()
        .args(["init", "--shell", "gemini"])
        .assert()
        .success();
    let agents: serde_json::Value = serde_json::from_str(&sb.read(".modix/agents.json")).unwrap();
    assert_eq!(agents["agents"]["executor"]["shell"], "gemini");

    let sb = Sandbox::new();
    let out = sb
        .modix()
        .args(["init", "--shell", "cursor"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(output_text(&out).contains("unknown shell `cursor`"));
    assert!(
        !sb.root().join(".modix").exists(),
        "nothing may be written on error"
    );
}

#[test]
fn init_binds_the_tester_to_the_projects_test_command() {
    let sb = Sandbox::new();
    sb.write("Cargo.toml", "[package]\nname = \"x\"\n");
    let out = sb.modix().arg("init").output().unwrap();
    let text = output_text(&out);
    assert!(
        text.contains("Bound the tester to `cargo test` (Cargo.toml)"),
        "{text}"
    );
    let agents: serde_json::Value = serde_json::from_str(&sb.read(".modix/agents.json")).unwrap();
    assert_eq!(
        agents["agents"]["tester"]["command"],
        serde_json::json!(["cargo", "test"])
    );
    sb.modix().arg("validate").assert().success();
}

#[test]
fn commands_outside_a_project_say_how_to_start_one() {
    let sb = Sandbox::new();
    let out = sb.modix().arg("validate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = output_text(&out);
    assert!(text.contains("not a modix project"), "{text}");
    assert!(text.contains("modix init"), "{text}");
}

#[test]
fn a_project_flag_naming_a_file_or_nothing_says_so() {
    let sb = Sandbox::new();
    let file = sb.dir.path().join("notes.txt");
    std::fs::write(&file, "x").unwrap();
    let missing = sb.dir.path().join("nope");
    for (path, says) in [
        (
            &file,
            format!("--project {} is a file, not a folder", file.display()),
        ),
        (
            &missing,
            format!("--project {}: no such folder", missing.display()),
        ),
    ] {
        let out = sb
            .modix()
            .arg("--project")
            .arg(path)
            .arg("validate")
            .output()
            .unwrap();
        let text = output_text(&out);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(text.contains(&says), "{text}");
    }
}

#[test]
fn project_is_found_from_a_subdirectory() {
    let sb = Sandbox::initialized();
    std::fs::create_dir_all(sb.root().join("src/deep")).unwrap();
    sb.modix()
        .current_dir(sb.root().join("src/deep"))
        .arg("validate")
        .assert()
        .success();
}

#[test]
fn version_and_help() {
    let sb = Sandbox::new();
    let out = sb.modix().arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("modix "));
    let out = sb.modix().arg("help").output().unwrap();
    let text = output_text(&out);
    for cmd in [
        "init", "validate", "doctor", "fsm", "go", "resume", "history",
    ] {
        assert!(text.contains(cmd), "help lacks {cmd}");
    }
    let out = sb.modix().arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
