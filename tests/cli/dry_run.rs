//! `modix go --dry-run`: the bindings, command lines and first prompts a
//! run would use, and nothing else — no run recorded, no workspace made,
//! no process started. And `go --epic-file PATH` (or `-`), an epic too long
//! for the command line.

use crate::util::{Sandbox, output_text};

/// The example, with an agent script that leaves a mark whenever it runs
/// (even for `--version`), so a test can tell that nothing was started.
fn example_with_marker() -> (Sandbox, std::path::PathBuf) {
    let sb = Sandbox::example();
    let marker = sb.dir.path().join("started");
    sb.agent_script(&format!("#!/bin/sh\ntouch {}\nexit 0\n", marker.display()));
    (sb, marker)
}

fn filters(sb: &Sandbox) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path("snapshots");
    s.set_prepend_module_to_snapshot(false);
    s.add_filter(
        &regex::escape(&sb.dir.path().display().to_string()),
        "[SANDBOX]",
    );
    // Where python3 is, and which proxy and CA variables are set, differ
    // between machines.
    s.add_filter(r"\S*/python3\b", "[PYTHON3]");
    s.add_filter(r"(?m)^  env: .*$", "  env: [NAMES]");
    s
}

#[test]
fn a_dry_run_shows_the_plan_and_does_nothing() {
    let (sb, marker) = example_with_marker();
    let out = sb
        .modix()
        .args(["go", "--dry-run", "Fix mean()"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!marker.exists(), "an agent was started");
    let modix = sb.root().join(".modix");
    for left in ["modix.db", "runs", "state.json"] {
        assert!(!modix.join(left).exists(), "{left} was made: {text}");
    }
    let home = sb.dir.path().join("home");
    assert!(!home.join("worktrees").exists(), "a workspace was made");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("Epic:\nFix mean()"), "{stdout}");
    filters(&sb).bind(|| insta::assert_snapshot!("dry_run", stdout));
    // Nothing recorded: history has no run.
    let out = sb.modix().arg("history").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("No runs yet"));
}

#[test]
fn a_dry_run_in_json() {
    let (sb, marker) = example_with_marker();
    let out = sb
        .modix()
        .env("ANTHROPIC_API_KEY", "sk-ant-api03-dryrunsecret0123456789")
        .args([
            "go",
            "--dry-run",
            "--json",
            "Fix it with sk-ant-api03-dryrunsecret0123456789",
        ])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!marker.exists(), "an agent was started");
    assert!(
        !text.contains("dryrunsecret"),
        "the key was printed: {text}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["workflow"], "plan_execute_test");
    let states: Vec<&str> = v["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["PLANNING", "EXECUTING", "TESTING"]);
    let planner = &v["states"][0];
    assert_eq!(planner["binding"]["kind"], "shell");
    assert_eq!(planner["binding"]["model"], "scripted-v1");
    let argv: Vec<&str> = planner["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(argv[0].ends_with("agents/scripted-agent"), "{argv:?}");
    assert_eq!(argv[1..], ["--model", "scripted-v1", "--mode", "read-only"]);
    assert_eq!(planner["prompt_via"], "stdin");
    assert_eq!(planner["worst_case_visits"], 1);
    let env: Vec<&str> = planner["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        env.contains(&"MODIX_STATE") && env.contains(&"PATH"),
        "{env:?}"
    );
    assert!(
        !env.contains(&"ANTHROPIC_API_KEY"),
        "not this agent's: {env:?}"
    );
    assert_eq!(v["states"][2]["binding"]["kind"], "command");
    assert_eq!(v["first"]["state"], "PLANNING");
    let prompt = v["first"]["prompt"].as_str().unwrap();
    assert!(prompt.contains("Fix it with [REDACTED"), "{prompt}");
    assert!(
        prompt.contains("<run-dir>/schemas/task_spec.schema.json"),
        "{prompt}"
    );
}

#[test]
fn a_dry_run_says_which_agent_would_not_start() {
    let sb = Sandbox::example();
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["no-such-test-runner", "-q"])
    });
    let out = sb.modix().args(["go", "--dry-run", "x"]).output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("  no-such-test-runner -q\n  would not start: agent `tester`: program `no-such-test-runner` not found"),
        "{text}"
    );
}

#[test]
fn the_epic_comes_from_a_file_or_stdin() {
    let sb = Sandbox::example();
    // Outside the project is fine: it is the user's file.
    let file = sb.dir.path().join("epic.md");
    std::fs::write(&file, "Fix mean()\n\nIt divides by one too many.\n").unwrap();
    let out = sb
        .modix()
        .args(["go", "--dry-run", "--json", "--epic-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["epic"], "Fix mean()\n\nIt divides by one too many.\n");

    // A real run, its epic on stdin: larger than a command line can carry.
    let epic = format!("Fix mean().\n{}", "Details. ".repeat(100_000));
    let out = sb
        .modix()
        .args(["go", "--json", "--epic-file", "-"])
        .write_stdin(epic.clone())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    assert_eq!(sb.runs()[0]["epic"], epic.as_str());
}

#[test]
fn a_bad_epic_file_is_a_usage_error_naming_it() {
    let sb = Sandbox::example();
    let dir = sb.dir.path();
    std::fs::write(dir.join("empty.md"), " \n\t\n").unwrap();
    std::fs::write(dir.join("big.md"), "x".repeat((1 << 20) + 1)).unwrap();
    std::fs::write(dir.join("binary.md"), b"fix \xff\xfe it").unwrap();
    let cases: [(&[&str], &str); 7] = [
        (
            &["--epic-file", "missing.md"],
            "cannot read the epic file missing.md",
        ),
        (
            &["--epic-file", "../empty.md"],
            "the epic file ../empty.md is empty",
        ),
        (
            &["--epic-file", "../big.md"],
            "the epic file ../big.md is 1048577 bytes; an epic may be at most 1 MiB",
        ),
        (
            &["--epic-file", "../binary.md"],
            "the epic file ../binary.md is not UTF-8 text",
        ),
        (
            &["--epic-file", ".modix"],
            "cannot read the epic file .modix",
        ),
        (
            &["--epic-file", "../empty.md", "an epic"],
            "cannot be used with",
        ),
        (&[], "required arguments were not provided"),
    ];
    for (args, says) in cases {
        let out = sb.modix().arg("go").args(args).output().unwrap();
        let text = output_text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert!(text.contains(says), "{args:?}: {text}");
    }
    // Too much on stdin.
    let out = sb
        .modix()
        .args(["go", "--epic-file", "-"])
        .write_stdin("y".repeat((1 << 20) + 10))
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("the epic on standard input is more than 1 MiB"),
        "{text}"
    );
    assert!(
        !sb.root().join(".modix/modix.db").exists(),
        "nothing recorded"
    );
}

/// A prompt whose loops multiply past any use passes `validate` (each
/// range is small enough) but is stopped while it renders, quickly, with
/// a message saying why; no agent starts, in a dry run or a real one.
#[test]
fn a_prompt_that_would_render_forever_is_stopped() {
    let (sb, marker) = example_with_marker();
    let prompt = sb.root().join(".modix/prompts/planner.md");
    std::fs::write(
        &prompt,
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ epic }}\n",
    )
    .unwrap();
    sb.modix().arg("validate").assert().success();
    for args in [
        &["go", "--dry-run", "Fix mean()"][..],
        &["go", "Fix mean()"],
    ] {
        let t0 = std::time::Instant::now();
        let out = sb.modix().args(args).output().unwrap();
        let text = output_text(&out);
        assert_ne!(out.status.code(), Some(0), "{args:?}\n{text}");
        assert!(
            text.contains("rendering ran past 30000000 steps"),
            "{args:?}\n{text}"
        );
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "{args:?}"
        );
    }
    assert!(!marker.exists(), "an agent started");
}

#[test]
fn a_key_given_in_any_field_of_the_preview_is_redacted_in_both_views() {
    let (sb, marker) = example_with_marker();
    let key = "sk-ant-api03-pastedbymistake0123456789";
    for json in [false, true] {
        let mut cmd = sb.modix();
        cmd.env("ANTHROPIC_API_KEY", key).args([
            "go",
            "--dry-run",
            "--model",
            &format!("executor={key}"),
            "Fix it",
        ]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        let text = output_text(&out);
        assert_eq!(out.status.code(), Some(0), "{text}");
        assert!(
            !text.contains("pastedbymistake"),
            "the key was printed: {text}"
        );
        assert!(text.contains("[REDACTED:ANTHROPIC_API_KEY]"), "{text}");
    }
    assert!(!marker.exists(), "an agent was started");
}

#[test]
fn a_prompt_that_would_hold_unbounded_memory_is_stopped_and_its_run_resumes_once_fixed() {
    let (sb, marker) = example_with_marker();
    let prompt = sb.root().join(".modix/prompts/planner.md");
    let fixed = std::fs::read_to_string(&prompt).unwrap();
    for bomb in [
        // A string doubled 40 times in a loop: a terabyte.
        "{% set ns = namespace(x='aaaaaaaaaaaaaaaa') %}{% for i in range(40) %}{% set ns.x = ns.x ~ ns.x %}{% endfor %}{{ ns.x | length }}\n",
        // The same in twelve plain lines from a megabyte: 4 GiB.
        &format!(
            "{{% set a = 'x' * 1000000 %}}{}{{{{ a | length }}}}\n",
            "{% set a = a ~ a %}".repeat(12)
        ),
    ] {
        std::fs::write(&prompt, bomb).unwrap();
        sb.modix().arg("validate").assert().success();
        let out = sb
            .modix()
            .args(["go", "--dry-run", "Fix mean()"])
            .output()
            .unwrap();
        let text = output_text(&out);
        assert_eq!(out.status.code(), Some(3), "{bomb}\n{text}");
        assert!(
            text.contains(
                "error: prompt template `.modix/prompts/planner.md` took more than 512 MiB of memory while rendering"
            ),
            "{bomb}\n{text}"
        );
    }
    // Before a run: nothing is recorded.
    let out = sb.modix().args(["go", "Fix mean()"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", output_text(&out));
    assert!(!marker.exists(), "an agent started");
    assert_eq!(sb.runs().as_array().unwrap().len(), 0);
    // With --json, stdout's last word is a JSON error object, as for any
    // other failure.
    let out = sb
        .modix()
        .args(["go", "--json", "Fix mean()"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", output_text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(v["error"]["code"], "template", "{v}");
    assert_eq!(v["error"]["exit_code"], 3, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("took more than 512 MiB"),
        "{v}"
    );
    // A later agent's, in a run: it stops there, resumable; fixed, the
    // run goes on.
    std::fs::write(&prompt, fixed).unwrap();
    let executor = sb.root().join(".modix/prompts/executor.md");
    let fixed = std::fs::read_to_string(&executor).unwrap();
    std::fs::write(
        &executor,
        "{% set ns = namespace(x='aaaaaaaaaaaaaaaa') %}{% for i in range(40) %}{% set ns.x = ns.x ~ ns.x %}{% endfor %}{{ ns.x | length }}\n",
    )
    .unwrap();
    sb.agent_script(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("examples/bugfix/agents/scripted-agent"),
        )
        .unwrap(),
    );
    stops_the_run_then_resumes_once_fixed(
        &sb,
        &executor,
        &fixed,
        "`.modix/prompts/executor.md` took more than 512 MiB",
    );
}

/// `go` with a later agent's template broken stops the run (exit 3) saying
/// `says`; with the template back as `fixed`, `resume` ends it.
fn stops_the_run_then_resumes_once_fixed(
    sb: &Sandbox,
    template: &std::path::Path,
    fixed: &str,
    says: &str,
) {
    let out = sb.modix().args(["go", "Fix mean()"]).output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains(says), "{text}");
    std::fs::write(template, fixed).unwrap();
    let r = sb.resume_json("last");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

#[test]
fn a_template_that_fails_on_the_runs_data_fails_before_the_run_or_stops_it_resumable() {
    let sb = Sandbox::example();
    // The first agent's: `go` renders it before recording anything.
    let planner = sb.root().join(".modix/prompts/planner.md");
    let fixed = std::fs::read_to_string(&planner).unwrap();
    std::fs::write(&planner, "Epic: {{ epic + 1 }}\n").unwrap();
    sb.modix().arg("validate").assert().success();
    let out = sb.modix().args(["go", "Fix mean()"]).output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("help: fix the template; nothing was run"),
        "{text}"
    );
    assert_eq!(sb.runs().as_array().unwrap().len(), 0, "a run was recorded");
    // A later agent's: the run stops there (exit 3), and goes on once fixed.
    std::fs::write(&planner, fixed).unwrap();
    let executor = sb.root().join(".modix/prompts/executor.md");
    let fixed = std::fs::read_to_string(&executor).unwrap();
    std::fs::write(&executor, "Epic: {{ epic + 1 }}\n").unwrap();
    stops_the_run_then_resumes_once_fixed(
        &sb,
        &executor,
        &fixed,
        "help: fix the template, then `modix resume` continues the run",
    );
}
