//! `go --brain AGENT=BRAIN`, `--model AGENT=MODEL` and `--env NAME`: one
//! run's changes to its agents, applied before it starts and on its record.

use crate::scenarios;
use crate::util::{Sandbox, output_text};

/// The example with a second brain, `big`.
fn example() -> Sandbox {
    let sb = Sandbox::example();
    sb.edit_json(".modix/brains.json", |v| {
        v["brains"]["big"] = serde_json::json!({ "provider": "local", "model": "big-v2" });
    });
    sb
}

/// `go --dry-run --json ARGS…`, which must succeed.
fn dry_run(sb: &Sandbox, args: &[&str]) -> serde_json::Value {
    let out = sb
        .modix()
        .args(["go", "--dry-run", "--json"])
        .args(args)
        .arg("epic")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn brain_and_model_change_one_agent_for_one_run() {
    let sb = example();
    let v = dry_run(
        &sb,
        &["--brain", "executor=big", "--model", "planner=tiny-v0"],
    );
    let (planner, executor) = (&v["states"][0], &v["states"][1]);
    assert_eq!(planner["binding"]["brain"], "scripted");
    assert_eq!(planner["binding"]["model"], "tiny-v0");
    assert_eq!(strings(&planner["argv"])[1..3], ["--model", "tiny-v0"]);
    assert_eq!(executor["binding"]["brain"], "big");
    assert_eq!(strings(&executor["argv"])[1..3], ["--model", "big-v2"]);
    // A model on top of another brain.
    let v = dry_run(
        &sb,
        &["--brain", "executor=big", "--model", "executor=big-v3"],
    );
    assert_eq!(v["states"][1]["binding"]["brain"], "big");
    assert_eq!(v["states"][1]["binding"]["model"], "big-v3");
    // The files are untouched: the next run is as configured.
    let v = dry_run(&sb, &[]);
    assert_eq!(v["states"][1]["binding"]["model"], "scripted-v1");
}

#[test]
fn overrides_are_on_the_runs_record() {
    let sb = example();
    // The executor says what it received.
    scenarios::agent(
        &sb,
        r##"    echo "# changed" >> calc.py
    echo "{\"outcome\":\"success\",\"summary\":\"delay=${BOT_DELAY:-unset}\",\"files_changed\":[\"calc.py\"],\"error\":null}""##,
    );
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["true"])
    });
    let run = |extra: &[&str]| {
        let out = sb
            .modix()
            .env("BOT_DELAY", "7")
            .args(["go", "--json"])
            .args(extra)
            .arg("epic")
            .output()
            .unwrap();
        let r = crate::util::GoResult::parse(&out);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        r
    };
    // Without --env, the allowlist drops the variable.
    let r = run(&[]);
    assert!(
        r.transitions[2]["reason"]
            .as_str()
            .unwrap()
            .contains("delay=unset")
    );
    let r = run(&["--env", "BOT_DELAY", "--model", "executor=big-v9"]);
    assert!(
        r.transitions[2]["reason"]
            .as_str()
            .unwrap()
            .contains("delay=7"),
        "{:?}",
        r.transitions[2]
    );
    let inv = sb.invocation(&r.run_id(), 2);
    assert_eq!(inv["agent"], "executor");
    let argv = strings(&inv["argv"]);
    assert_eq!(argv[1..3], ["--model", "big-v9"], "{argv:?}");
    assert_eq!(inv["context"]["brain"]["model"], "big-v9");
}

#[test]
fn env_adds_a_variable_to_every_agents_environment() {
    let sb = example();
    let out = sb
        .modix()
        .env("BOT_DELAY", "1")
        .args([
            "go",
            "--dry-run",
            "--json",
            "--env",
            "BOT_DELAY",
            "--env",
            "NOT_SET_ANYWHERE",
            "x",
        ])
        .env_remove("NOT_SET_ANYWHERE")
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(
            "warning: --env NOT_SET_ANYWHERE: NOT_SET_ANYWHERE is not set in your environment"
        ),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for state in v["states"].as_array().unwrap() {
        assert!(
            strings(&state["env"]).contains(&"BOT_DELAY".to_owned()),
            "{state}"
        );
    }
    let v = dry_run(&sb, &[]);
    assert!(!strings(&v["states"][0]["env"]).contains(&"BOT_DELAY".to_owned()));
}

#[test]
fn unknown_names_are_usage_errors_with_a_suggestion() {
    let sb = example();
    // The planner needs `json-output`: the shell no longer provides it, its brain does.
    sb.edit_json(".modix/shells.json", |v| {
        v["shells"]["scripted"]["capabilities"] = serde_json::json!(["code-edit"])
    });
    sb.edit_json(".modix/brains.json", |v| {
        v["brains"]["scripted"]["capabilities"] = serde_json::json!(["json-output"])
    });
    let cases: [(&[&str], &str); 8] = [
        (&["--brain", "executer=big"], "unknown agent `executer`"),
        (&["--brain", "executer=big"], "did you mean `executor`?"),
        (&["--model", "planer=x"], "did you mean `planner`?"),
        (&["--brain", "executor=bigg"], "unknown brain `bigg`"),
        (&["--brain", "executor=bigg"], "did you mean `big`?"),
        (&["--brain", "tester=big"], "agent `tester` runs a command"),
        (
            &["--brain", "planner=big"],
            "agent `planner` requires `json-output` but shell `scripted` and brain `big` do not provide it",
        ),
        (&["--env", "1X"], "--env 1X: not a variable name"),
    ];
    for (args, says) in cases {
        for dry in [true, false] {
            let mut cmd = sb.modix();
            cmd.arg("go").args(args);
            if dry {
                cmd.arg("--dry-run");
            }
            let out = cmd.arg("epic").output().unwrap();
            let text = output_text(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
            assert!(text.contains(says), "{args:?}: {text}");
        }
    }
    for bad in ["executor", "executor=", "=big"] {
        let out = sb
            .modix()
            .args(["go", "--brain", bad, "x"])
            .output()
            .unwrap();
        let text = output_text(&out);
        assert_eq!(out.status.code(), Some(2), "{bad}: {text}");
        assert!(text.contains("is not AGENT=VALUE"), "{bad}: {text}");
    }
    assert!(
        !sb.root().join(".modix/modix.db").exists(),
        "nothing was recorded"
    );
}
