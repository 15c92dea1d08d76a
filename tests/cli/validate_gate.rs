//! `modix validate` is the gate `modix go` passes through: a corpus of broken
//! projects, one class of problem at a time (prompt templates, emit rules,
//! machine roles, the files config names, paths that leave the project,
//! messages). Each must be rejected by `validate` with its file, place and
//! fix, exit 2 and no panic — and by `go` the same way, with the same
//! diagnostics, before it starts a run or spawns anything: the project's
//! agent CLI is a script that leaves a marker file when run.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::util::{Sandbox, output_text};

/// An initialized project whose agents run `claude`, here a script that
/// appends to the marker file: if the marker exists, something was run.
fn gated() -> Sandbox {
    let sb = Sandbox::new();
    let script = format!("#!/bin/sh\necho ran >> '{}'\n", marker(&sb).display());
    sb.fake_bin("claude", &script);
    sb.modix().arg("init").assert().success();
    sb
}

fn marker(sb: &Sandbox) -> PathBuf {
    sb.dir.path().join("marker")
}

/// The shipped default workflow, as a project file would copy it.
fn shipped_workflow() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fsm/plan_execute_test.toml");
    std::fs::read_to_string(path).expect("shipped workflow")
}

/// The project overrides the default workflow with an edited copy.
fn override_workflow(sb: &Sandbox, edit: impl Fn(String) -> String) {
    sb.write(
        ".modix/fsm/plan_execute_test.toml",
        &edit(shipped_workflow()),
    );
}

/// One broken project: how to break it, what `validate` must say, and what
/// must never appear in any output (file contents from outside, secrets).
struct Case {
    name: &'static str,
    setup: fn(&Sandbox),
    expect: &'static [&'static str],
    never: &'static [&'static str],
}

/// (severity, code, file, line) of every diagnostic, sorted.
fn findings(diagnostics: &Value) -> Vec<String> {
    let mut out: Vec<String> = diagnostics
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            format!(
                "{} {} {}:{}",
                d["severity"].as_str().unwrap_or_default(),
                d["code"].as_str().unwrap_or_default(),
                d["file"].as_str().unwrap_or_default(),
                d["line"]
            )
        })
        .collect();
    out.sort();
    out
}

/// `validate` rejects the case as described, and `go` rejects it with the
/// same findings, before any run starts or any agent runs.
fn check(case: &Case) {
    let sb = gated();
    (case.setup)(&sb);
    let name = case.name;

    let out = sb.modix().arg("validate").output().unwrap();
    let human = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{name}: validate\n{human}");
    for needle in case.expect {
        assert!(
            human.contains(needle),
            "{name}: missing {needle:?} in\n{human}"
        );
    }

    let out = sb.modix().args(["validate", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{name}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("validate --json");
    let validated = findings(&v["diagnostics"]);
    assert!(
        validated.iter().any(|f| f.starts_with("error ")),
        "{name}: {validated:?}"
    );

    let out = sb
        .modix()
        .args(["go", "--json", "Fix it"])
        .output()
        .unwrap();
    let go_text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{name}: go\n{go_text}");
    assert!(
        !go_text.contains("run_started"),
        "{name}: a run started\n{go_text}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("go --json error");
    // The same problems; a file the run does not use only warns for `go`.
    let same = |f: &Vec<String>| -> Vec<String> {
        let mut v: Vec<String> = f
            .iter()
            .map(|x| x.split_once(' ').map_or("", |(_, rest)| rest).to_owned())
            .collect();
        v.sort();
        v
    };
    let found = findings(&v["error"]["diagnostics"]["diagnostics"]);
    assert_eq!(
        same(&found),
        same(&validated),
        "{name}: go and validate found different problems"
    );
    let out = sb.modix().args(["go", "Fix it"]).output().unwrap();
    let go_human = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{name}: go\n{go_human}");
    assert!(!go_human.contains("Started run"), "{name}\n{go_human}");
    assert!(!marker(&sb).exists(), "{name}: an agent was run");

    for text in [&human, &go_text, &go_human] {
        assert!(!text.contains("panicked"), "{name}\n{text}");
        for secret in case.never {
            assert!(
                !text.contains(secret),
                "{name}: {secret:?} was echoed\n{text}"
            );
        }
    }
}

fn edit_agents(sb: &Sandbox, edit: impl FnOnce(&mut Value)) {
    sb.edit_json(".modix/agents.json", edit);
}

#[test]
fn the_unbroken_project_runs_and_the_marker_shows_it() {
    let sb = gated();
    sb.modix().arg("validate").assert().success();
    // The fake `claude` has no version and no login: past the readiness check.
    let out = sb
        .modix()
        .env("MODIX_SKIP_READINESS", "1")
        .args(["go", "Fix it"])
        .output()
        .unwrap();
    assert!(
        output_text(&out).contains("Started run"),
        "{}",
        output_text(&out)
    );
    assert!(marker(&sb).exists(), "the agent script did not run");
}

const TEMPLATES: &[Case] = &[
    Case {
        name: "unclosed variable",
        setup: |sb| sb.write(".modix/prompts/planner.md", "Plan this:\n{{ epic }\n"),
        expect: &[
            ".modix/prompts/planner.md:2:9",
            "template::syntax",
            "syntax error",
        ],
        never: &[],
    },
    Case {
        name: "unclosed comment",
        setup: |sb| {
            sb.write(
                ".modix/prompts/executor.md",
                "Do it.\n{# a note that never ends\n",
            )
        },
        expect: &[
            ".modix/prompts/executor.md:2",
            "template::syntax",
            "unexpected end of comment",
        ],
        never: &[],
    },
    Case {
        name: "missing endif",
        setup: |sb| {
            sb.write(
                ".modix/prompts/tester.md",
                "{% if feedback %}\nTry again: {{ feedback }}\n",
            )
        },
        expect: &[".modix/prompts/tester.md:", "template::syntax"],
        never: &[],
    },
    Case {
        name: "unknown filter",
        setup: |sb| {
            sb.write(
                ".modix/prompts/planner.md",
                "{{ epic | shout }}\n{{ epic | uper }}\n",
            )
        },
        expect: &[
            ".modix/prompts/planner.md:1:11",
            "unknown filter `shout`",
            ".modix/prompts/planner.md:2:11",
            "did you mean `upper`?",
        ],
        never: &[],
    },
    Case {
        name: "unknown test",
        setup: |sb| {
            sb.write(
                ".modix/prompts/planner.md",
                "{% if attempt is evn %}again{% endif %}\n",
            )
        },
        expect: &[
            "template::unknown-test",
            "unknown test `evn`",
            "did you mean `even`?",
        ],
        never: &[],
    },
    Case {
        name: "include of a missing file",
        setup: |sb| {
            sb.write(
                ".modix/prompts/planner.md",
                "{% include \"prompts/common.md\" %}\n{{ epic }}\n",
            )
        },
        expect: &[
            ".modix/prompts/planner.md:1:3",
            "template::include",
            "`include` is not supported",
        ],
        never: &[],
    },
    Case {
        name: "undefined variables",
        setup: |sb| {
            sb.write(
                ".modix/prompts/executor.md",
                "Epic: {{ epik }}\nProject: {{ project.nmae }}\nModel: {{ brain.modle }}\n{% for c in project.conventions %}{{ c.x }}{% endfor %}\n",
            )
        },
        expect: &[
            ".modix/prompts/executor.md:1:10",
            "unknown variable `epik`",
            "did you mean `epic`?",
            ".modix/prompts/executor.md:2:13",
            "did you mean `project.name`?",
            ".modix/prompts/executor.md:3:11",
            "did you mean `brain.model`?",
        ],
        never: &[],
    },
    Case {
        name: "a plain value has no fields",
        setup: |sb| sb.write(".modix/prompts/planner.md", "{{ epic.title }}\n"),
        expect: &["`epic` is a plain value; `epic.title` names nothing"],
        never: &[],
    },
    Case {
        name: "not UTF-8",
        setup: |sb| {
            std::fs::write(
                sb.root().join(".modix/prompts/tester.md"),
                b"Test it.\nab\xff\xfe\n",
            )
            .unwrap()
        },
        expect: &[
            ".modix/prompts/tester.md:2:3",
            "config::not-utf8",
            "not UTF-8 text",
        ],
        never: &[],
    },
    Case {
        name: "a system prompt is checked too",
        setup: |sb| {
            sb.write(".modix/prompts/system.md", "You are {{ rol }}.\n");
            edit_agents(sb, |v| {
                v["agents"]["planner"]["manifest"]["system_prompt"] = "prompts/system.md".into()
            });
        },
        expect: &[".modix/prompts/system.md:1:12", "did you mean `role`?"],
        never: &[],
    },
];

#[test]
fn prompt_templates_are_compiled_against_the_context() {
    TEMPLATES.iter().for_each(check);
}

const EMIT_RULES: &[Case] = &[
    Case {
        name: "misspelled field",
        setup: |sb| {
            override_workflow(sb, |t| {
                t.replace("'outcome == \"success\"'", "'outcom == \"success\"'")
            })
        },
        expect: &[
            ".modix/fsm/plan_execute_test.toml:40:27",
            "fsm::unknown-field",
            "field `outcom` does not exist",
            "did you mean `outcome`?",
        ],
        never: &[],
    },
    Case {
        name: "string against a boolean",
        setup: |sb| {
            override_workflow(sb, |t| {
                t.replace("\"passed == true\"", "'passed == \"true\"'")
            })
        },
        expect: &[
            ".modix/fsm/plan_execute_test.toml:59:27",
            "fsm::type-mismatch",
            "`passed` in test_result is a boolean, but \"true\" is a string",
            "write `passed == true`",
        ],
        never: &[],
    },
    Case {
        name: "value outside the enum",
        setup: |sb| {
            override_workflow(sb, |t| {
                t.replace("'outcome == \"failure\"'", "'outcome != \"failed\"'")
            })
        },
        expect: &[
            "fsm::type-mismatch",
            "never \"failed\"",
            "did you mean `outcome != \"failure\"`?",
        ],
        never: &[],
    },
    Case {
        name: "unknown output schema",
        setup: |sb| {
            override_workflow(sb, |t| {
                t.replace("output = \"test_result\"", "output = \"test_results\"")
            })
        },
        expect: &[
            "fsm::unknown-output",
            "unknown output schema `test_results`",
            "did you mean `test_result`?",
        ],
        never: &[],
    },
];

#[test]
fn emit_rules_are_checked_against_the_output_schema() {
    EMIT_RULES.iter().for_each(check);
}

#[test]
fn a_transition_no_rule_can_raise_is_a_warning() {
    let sb = gated();
    override_workflow(&sb, |t| {
        format!("{t}\n[[transitions]]\nfrom = \"TESTING\"\nevent = \"test_pass\"\nto = \"DONE\"\n")
    });
    let out = sb.modix().arg("validate").output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "a warning does not fail:\n{text}");
    for needle in [
        "warning[fsm::dead-transition]",
        "transition TESTING —test_pass→ DONE can never fire",
        "did you mean `tests_pass`?",
    ] {
        assert!(text.contains(needle), "missing {needle:?}:\n{text}");
    }
    let out = sb.modix().args(["fsm", "check"]).output().unwrap();
    assert!(output_text(&out).contains("fsm::dead-transition"));
}

const ROLES: &[Case] = &[
    Case {
        name: "a lifecycle as the project's workflow",
        setup: |sb| {
            sb.edit_json(".modix/projects.json", |v| {
                v["workflow"] = "execution_fsm_v1".into()
            })
        },
        expect: &[
            ".modix/projects.json:",
            "workflow `execution_fsm_v1` is a lifecycle FSM (it drives one agent invocation), not a workflow",
        ],
        never: &[],
    },
    Case {
        name: "a workflow as an agent's lifecycle",
        setup: |sb| {
            edit_agents(sb, |v| {
                v["agents"]["tester"]["fsm"] = "plan_execute_test".into()
            })
        },
        expect: &[
            "fsm::role",
            "agent `tester` names workflow `plan_execute_test` as its lifecycle FSM",
            "/agents/tester/fsm",
        ],
        never: &[],
    },
    Case {
        name: "a project lifecycle file as the workflow",
        setup: |sb| {
            let life = std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("fsm/execution_fsm_v1.toml"),
            )
            .unwrap()
            .replace("id = \"execution_fsm_v1\"", "id = \"my_life\"");
            sb.write(".modix/fsm/my_life.toml", &life);
            sb.edit_json(".modix/projects.json", |v| v["workflow"] = "my_life".into());
        },
        expect: &["workflow `my_life` is a lifecycle FSM"],
        never: &[],
    },
];

#[test]
fn each_machine_is_checked_for_the_role_it_plays() {
    ROLES.iter().for_each(check);
    // Asking for a lifecycle on the command line is refused too.
    let sb = gated();
    let out = sb
        .modix()
        .args(["go", "--workflow", "execution_fsm_v1", "Fix it"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("`execution_fsm_v1` is a lifecycle FSM"),
        "{text}"
    );
    assert!(!marker(&sb).exists());
}

const FILES: &[Case] = &[
    Case {
        name: "a prompt that is a directory",
        setup: |sb| {
            edit_agents(sb, |v| {
                v["agents"]["planner"]["manifest"]["prompt"] = "prompts".into()
            })
        },
        expect: &[
            "config::not-a-file",
            "prompt template `.modix/prompts` is a directory, not a file",
            "/agents/planner/manifest/prompt",
        ],
        never: &[],
    },
    Case {
        name: "a prompt that is a symlink loop",
        setup: |sb| {
            let dir = sb.root().join(".modix/prompts");
            std::fs::remove_file(dir.join("planner.md")).unwrap();
            std::os::unix::fs::symlink("planner.md", dir.join("planner.md")).unwrap();
        },
        expect: &[
            "config::symlink-loop",
            "prompt template `.modix/prompts/planner.md` is a symlink loop",
        ],
        never: &[],
    },
    Case {
        name: "a prompt that is a FIFO",
        setup: |sb| {
            let fifo = sb.root().join(".modix/prompts/pipe.md");
            assert!(
                std::process::Command::new("mkfifo")
                    .arg(&fifo)
                    .status()
                    .unwrap()
                    .success()
            );
            edit_agents(sb, |v| {
                v["agents"]["planner"]["manifest"]["prompt"] = "prompts/pipe.md".into()
            });
        },
        expect: &["config::not-a-file", "is a FIFO (named pipe), not a file"],
        never: &[],
    },
    Case {
        name: "a manifest that is a directory",
        setup: |sb| {
            edit_agents(sb, |v| {
                v["agents"]["executor"]["manifest"] = "prompts".into()
            })
        },
        expect: &[
            "manifest file `.modix/prompts` is a directory, not a file",
            "/agents/executor/manifest",
        ],
        never: &[],
    },
    Case {
        name: "a manifest that is a symlink loop",
        setup: |sb| {
            let dir = sb.root().join(".modix/manifests");
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::symlink("b.json", dir.join("a.json")).unwrap();
            std::os::unix::fs::symlink("a.json", dir.join("b.json")).unwrap();
            edit_agents(sb, |v| {
                v["agents"]["executor"]["manifest"] = "manifests/a.json".into()
            });
        },
        expect: &[
            "config::symlink-loop",
            "manifest file `.modix/manifests/a.json` is a symlink loop",
        ],
        never: &[],
    },
    Case {
        name: "a path through a file",
        setup: |sb| {
            edit_agents(sb, |v| {
                v["agents"]["tester"]["manifest"]["prompt"] = "prompts/tester.md/more.md".into()
            })
        },
        expect: &[
            "config::not-a-file",
            "a part of the path is a file, not a folder",
        ],
        never: &[],
    },
    Case {
        name: "a manifest file's own prompt is checked where it is written",
        setup: |sb| {
            sb.write(
                ".modix/manifests/planner.json",
                "{\n  \"prompt\": \"prompts/plannr.md\",\n  \"output_schema\": \"task_spec\"\n}\n",
            );
            edit_agents(sb, |v| {
                v["agents"]["planner"]["manifest"] = "manifests/planner.json".into()
            });
        },
        expect: &[
            ".modix/manifests/planner.json:2:13",
            "prompt template `.modix/prompts/plannr.md` does not exist",
            "(at /prompt)",
        ],
        never: &[],
    },
];

#[test]
fn every_file_config_names_is_checked_with_what_it_is() {
    FILES.iter().for_each(check);
}

#[test]
fn an_unreadable_prompt_is_reported_with_the_os_error() {
    use std::os::unix::fs::PermissionsExt as _;
    let sb = gated();
    let path = sb.root().join(".modix/prompts/planner.md");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::read(&path).is_ok() {
        // Root (or CAP_DAC_OVERRIDE) reads a 000 file: nothing to report.
        eprintln!(
            "note: this test runs with the power to read a chmod 000 file (root?); the permission assertion is skipped"
        );
        return;
    }
    let out = sb.modix().arg("validate").output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("config::unreadable"), "{text}");
    assert!(text.contains("Permission denied"), "{text}");
    let out = sb.modix().args(["go", "Fix it"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!marker(&sb).exists());
}

/// Outside the project: what a leak would show.
const PASSWD_LINE: &str = "root:x:0:0";
const AWS_LINE: &str = "aws_access_key_id = AKIAIOSFODNN7EXAMPLE";

/// A secret file next to the project (outside its `.modix/`).
fn outside_secret(sb: &Sandbox) -> PathBuf {
    let path = sb.dir.path().join("credentials");
    std::fs::write(&path, format!("[default]\n{AWS_LINE}\n")).unwrap();
    path
}

const OUTSIDE: &[Case] = &[
    Case {
        name: "a manifest path climbing to /etc/passwd",
        setup: |sb| {
            edit_agents(sb, |v| {
                v["agents"]["planner"]["manifest"] = "../../../../../../../../etc/passwd".into()
            })
        },
        expect: &[
            "config::outside-project",
            "leaves the project's .modix/ folder",
            "it was not read",
            "/agents/planner/manifest",
        ],
        never: &[PASSWD_LINE],
    },
    Case {
        name: "an absolute prompt path",
        setup: |sb| {
            edit_agents(sb, |v| {
                v["agents"]["executor"]["manifest"]["prompt"] = "/etc/passwd".into()
            })
        },
        expect: &["config::outside-project", "is an absolute path"],
        never: &[PASSWD_LINE],
    },
    Case {
        name: "a prompt symlink pointing outside",
        setup: |sb| {
            let secret = outside_secret(sb);
            let link = sb.root().join(".modix/prompts/planner.md");
            std::fs::remove_file(&link).unwrap();
            std::os::unix::fs::symlink(secret, link).unwrap();
        },
        expect: &[
            "config::outside-project",
            "outside the project's .modix/ folder (through a symlink)",
        ],
        never: &["aws_access_key_id", "AKIAIOSFODNN7EXAMPLE"],
    },
    Case {
        name: "a manifest symlink pointing outside",
        setup: |sb| {
            let secret = outside_secret(sb);
            std::os::unix::fs::symlink(secret, sb.root().join(".modix/tester.json")).unwrap();
            edit_agents(sb, |v| {
                v["agents"]["tester"]["manifest"] = "tester.json".into()
            });
        },
        expect: &[
            "config::outside-project",
            "manifest file `.modix/tester.json` resolves to",
        ],
        never: &["aws_access_key_id", "AKIAIOSFODNN7EXAMPLE"],
    },
    Case {
        name: "an API key where its variable's name belongs",
        setup: |sb| {
            sb.edit_json(".modix/brains.json", |v| {
                v["brains"]["anthropic"]["api_key_env"] =
                    "sk-ant-api03-Zq7vX9kLmN2pQrStUvWx3yZa".into()
            })
        },
        expect: &[
            ".modix/brains.json:",
            "config::secret-value",
            "looks like a secret key",
            "the NAME of the variable",
            "/brains/anthropic/api_key_env",
        ],
        never: &["sk-ant-api03", "Zq7vX9kLmN2pQrStUvWx3yZa"],
    },
    Case {
        name: "an AWS key in a shell's env list",
        setup: |sb| {
            sb.edit_json(".modix/shells.json", |v| {
                v["shells"]["claude"]["env"] = serde_json::json!(["HOME", "AKIAIOSFODNN7EXAMPLE"])
            })
        },
        expect: &["config::secret-value", "/shells/claude/env/1"],
        never: &["AKIAIOSFODNN7EXAMPLE"],
    },
];

#[test]
fn paths_stay_inside_the_project_and_secrets_are_never_echoed() {
    OUTSIDE.iter().for_each(check);
}

/// A duration no machine could wait out (and whose sums would overflow):
/// refused where it is written, before any command adds it up.
const DURATIONS: &[Case] = &[
    Case {
        name: "a state's timeout of i64::MAX seconds",
        setup: |sb| {
            override_workflow(sb, |t| {
                t.replacen(
                    "output = \"task_spec\"\n",
                    "output = \"task_spec\"\ntimeout_secs = 9223372036854775807\n",
                    1,
                )
            })
        },
        expect: &[
            "fsm::invalid-field",
            "timeout_secs = 9223372036854775807 is out of range (1 to 31536000)",
        ],
        never: &["panicked", "overflow"],
    },
    Case {
        name: "a transition bound above u32::MAX",
        setup: |sb| override_workflow(sb, |t| t.replacen("max = 3\n", "max = 4294967296\n", 1)),
        expect: &[
            "fsm::invalid-field",
            "max = 4294967296 is out of range (1 to 4294967295)",
            "a bound is how many times the transition may fire: a whole number from 1 to 4294967295",
        ],
        never: &["panicked", "overflow"],
    },
    Case {
        name: "a kill grace of u64::MAX seconds",
        setup: |sb| {
            sb.edit_json(".modix/runtimes.json", |v| {
                v["timeouts"]["kill_grace_secs"] = u64::MAX.into()
            })
        },
        expect: &[
            "config::schema",
            "18446744073709551615 is greater than the maximum of 31536000",
            "/timeouts/kill_grace_secs",
        ],
        never: &["panicked", "overflow"],
    },
    Case {
        name: "a default timeout of a century",
        setup: |sb| {
            sb.edit_json(".modix/runtimes.json", |v| {
                v["timeouts"]["default_secs"] = 3_153_600_000u64.into()
            })
        },
        expect: &["config::schema", "/timeouts/default_secs"],
        never: &["panicked"],
    },
    Case {
        name: "an unbounded capture",
        setup: |sb| {
            sb.edit_json(".modix/runtimes.json", |v| {
                v["output"]["max_capture_bytes"] = u64::MAX.into()
            })
        },
        expect: &["config::schema", "/output/max_capture_bytes"],
        never: &["panicked"],
    },
];

/// Expressions minijinja would recurse on past the stack (it aborted
/// modix): refused by their length of chain, before minijinja parses them.
const DEEP: &[Case] = &[
    Case {
        name: "a chain of 40,000 filters",
        setup: |sb| {
            let text = format!("{{{{ epic{} }}}}\n", "|e".repeat(40_000));
            std::fs::write(sb.root().join(".modix/prompts/planner.md"), text).unwrap();
        },
        expect: &[
            "template::too-deep",
            "this tag chains 40000 operators; a tag may chain at most 256",
        ],
        never: &["overflowed", "panicked"],
    },
    Case {
        name: "20,000 unary minus",
        setup: |sb| {
            let text = format!("Plan it.\n{{% set x = {}1 %}}\n", "-".repeat(20_000));
            std::fs::write(sb.root().join(".modix/prompts/planner.md"), text).unwrap();
        },
        expect: &["template::too-deep", "planner.md:2:"],
        never: &["overflowed", "panicked"],
    },
];

#[test]
fn a_template_too_deep_for_the_engine_is_refused() {
    DEEP.iter().for_each(check);
}

#[test]
fn durations_past_a_year_are_refused_where_they_are_written() {
    DURATIONS.iter().for_each(check);
    // The largest allowed, everywhere at once, adds up without overflow.
    let sb = gated();
    override_workflow(&sb, |t| {
        t.replace(
            "output = \"task_spec\"\n",
            "output = \"task_spec\"\ntimeout_secs = 31536000\n",
        )
    });
    sb.edit_json(".modix/runtimes.json", |v| {
        v["timeouts"]["kill_grace_secs"] = 31_536_000.into();
        v["timeouts"]["default_secs"] = 31_536_000.into();
    });
    sb.modix().arg("validate").assert().success();
    for args in [&["fsm", "check"][..], &["fsm", "show", "plan_execute_test"]] {
        let out = sb.modix().args(args).output().unwrap();
        let text = output_text(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}\n{text}");
        assert!(!text.contains("panicked"), "{text}");
    }
}

/// The project's own config files are confined as the files they name are:
/// one that is a symlink out of `.modix/` is refused unread, so no syntax
/// error quotes the other file, by `validate` and by `go`.
#[test]
fn a_config_file_that_is_a_symlink_out_of_the_project_is_not_read() {
    let files = [
        "agents.json",
        "shells.json",
        "brains.json",
        "runtimes.json",
        "projects.json",
        "version.json",
        "state.json",
    ];
    for (i, name) in files.into_iter().enumerate() {
        let sb = gated();
        let target = match i % 2 {
            0 => outside_secret(&sb),
            _ => PathBuf::from("/etc/passwd"),
        };
        let link = sb.root().join(".modix").join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for args in [&["validate"][..], &["go", "Fix it"]] {
            let out = sb.modix().args(args).output().unwrap();
            let text = output_text(&out);
            assert_eq!(out.status.code(), Some(2), "{name} {args:?}:\n{text}");
            assert!(text.contains("config::outside-project"), "{name}:\n{text}");
            assert!(
                text.contains(&format!("`.modix/{name}` resolves to")),
                "{name}:\n{text}"
            );
            for leak in [PASSWD_LINE, "aws_access_key_id", "AKIAIOSFODNN7EXAMPLE"] {
                assert!(!text.contains(leak), "{name} leaked {leak:?}:\n{text}");
            }
        }
        assert!(!marker(&sb).exists(), "{name}: an agent ran");
    }
    // Inside `.modix/`, a symlink is followed as before.
    let sb = gated();
    let modix = sb.root().join(".modix");
    std::fs::rename(modix.join("brains.json"), modix.join("brains.real.json")).unwrap();
    std::os::unix::fs::symlink("brains.real.json", modix.join("brains.json")).unwrap();
    sb.modix().arg("validate").assert().success();
}

const MESSAGES: &[Case] = &[
    Case {
        name: "a misspelled key inside an inline manifest",
        setup: |sb| {
            edit_agents(sb, |v| {
                let m = v["agents"]["planner"]["manifest"].as_object_mut().unwrap();
                let schema = m.remove("output_schema").unwrap();
                m.insert("output_shema".into(), schema);
            })
        },
        expect: &[
            "config::unknown-key",
            "unknown key `output_shema`",
            "did you mean `output_schema`?",
            "(at /agents/planner/manifest/output_shema)",
        ],
        never: &["oneOf", "untagged"],
    },
    Case {
        name: "a number out of range inside an inline manifest",
        setup: |sb| {
            edit_agents(sb, |v| {
                v["agents"]["executor"]["manifest"]["timeout_secs"] = 0.into()
            })
        },
        expect: &[
            "0 is less than the minimum of 1",
            "(at /agents/executor/manifest/timeout_secs)",
        ],
        never: &["oneOf", "untagged"],
    },
    Case {
        name: "a manifest that is neither a path nor an object",
        setup: |sb| edit_agents(sb, |v| v["agents"]["tester"]["manifest"] = 5.into()),
        expect: &[
            "5 is not of types \"string\", \"object\"",
            "(at /agents/tester/manifest)",
        ],
        never: &["oneOf", "untagged"],
    },
    Case {
        name: "unknown references beside schema errors in the same file",
        setup: |sb| {
            edit_agents(sb, |v| {
                v["agents"]["planner"]["colour"] = "red".into();
                v["agents"]["planner"]["brain"] = "antropic".into();
                v["agents"]["executor"]["manifest"]["timeout_secs"] = (-1).into();
                v["agents"]["tester"]["shell"] = "claud".into();
            })
        },
        expect: &[
            "unknown key `colour`",
            "unknown brain `antropic`",
            "did you mean `anthropic`?",
            "/agents/executor/manifest/timeout_secs",
            "unknown shell `claud`",
            "did you mean `claude`?",
        ],
        never: &[],
    },
    Case {
        name: "a broken override of the default workflow",
        setup: |sb| override_workflow(sb, |t| t.replace("initial = \"INIT\"", "initial = INIT")),
        expect: &[".modix/fsm/plan_execute_test.toml:7", "fsm::syntax"],
        never: &["unknown workflow `plan_execute_test`"],
    },
    Case {
        name: "agent checks run beside a broken workflow file",
        setup: |sb| {
            sb.write(".modix/fsm/review.toml", "id = \"review\"\nversion = \"1.0.0\"\ninitial = \"START\"\n[states.START]\nkind = \"input\"\nevent = \"go\"\n");
            edit_agents(sb, |v| v["agents"]["planner"]["brain"] = "antropic".into());
            sb.write(".modix/prompts/tester.md", "{{ epik }}\n");
        },
        expect: &[
            ".modix/fsm/review.toml",
            "unknown brain `antropic`",
            "unknown variable `epik`",
        ],
        never: &[],
    },
    Case {
        name: "two unbounded cycles are both reported",
        setup: |sb| {
            override_workflow(sb, |t| {
                t.lines()
                    .filter(|l| !l.starts_with("max = ") && !l.starts_with("exhausted = "))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        },
        expect: &[
            "cycle EXECUTING → TESTING → EXECUTING has no bounded transition",
            "cycle EXECUTING → EXECUTING has no bounded transition",
        ],
        never: &[],
    },
    Case {
        name: "independent workflow problems arrive at once",
        setup: |sb| {
            override_workflow(sb, |t| {
                t.replace("to = \"TESTING\"", "to = \"TESTNG\"")
                    .replace("max = 2\nexhausted = \"FAILED\"", "")
                    .replace("'outcome == \"failure\"'", "'outcome == \"fail\"'")
                    .replace(
                        "{ on = \"timeout\", event = \"tests_fail\" }",
                        "{ on = \"timeout\", event = \"tests_late\" }",
                    )
            })
        },
        expect: &[
            "transition to unknown state `TESTNG`",
            "did you mean `TESTING`?",
            "never \"fail\"",
            "can emit event `tests_late` but no transition handles it",
            "cycle EXECUTING → EXECUTING",
        ],
        never: &["cannot be reached", "no terminal state can be reached"],
    },
];

#[test]
fn messages_say_what_is_wrong_and_every_problem_arrives_at_once() {
    MESSAGES.iter().for_each(check);
}

/// `go` refuses exactly what `validate` refuses: every case above was
/// checked both ways in `check`; this one also holds a project with many
/// problems at once to the same standard.
#[test]
fn go_runs_the_checks_validate_runs() {
    let all = Case {
        name: "everything at once",
        setup: |sb| {
            for case in TEMPLATES
                .iter()
                .take(1)
                .chain(&EMIT_RULES[..1])
                .chain(&OUTSIDE[4..5])
                .chain(&MESSAGES[..1])
            {
                (case.setup)(sb);
            }
        },
        expect: &[
            "template::syntax",
            "fsm::unknown-field",
            "config::secret-value",
            "config::unknown-key",
        ],
        never: &["sk-ant-api03"],
    };
    check(&all);
}

#[test]
fn validate_refuses_a_broken_workflow_the_run_does_not_use() {
    let sb = gated();
    sb.write(".modix/fsm/review.toml", "id = \"review\"\nversion = \"1.0.0\"\ninitial = \"START\"\n[states.START]\nkind = \"inptu\"\n");
    let out = sb.modix().arg("validate").output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains(".modix/fsm/review.toml"), "{text}");
}

#[test]
fn go_runs_past_a_broken_workflow_it_does_not_use() {
    let sb = gated();
    sb.write(".modix/fsm/review.toml", "id = \"review\"\nversion = \"1.0.0\"\ninitial = \"START\"\n[states.START]\nkind = \"inptu\"\n");
    let out = sb
        .modix()
        .env("MODIX_SKIP_READINESS", "1")
        .args(["go", "Fix it"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(text.contains("warning: "), "{text}");
    assert!(text.contains("in a file this run does not use: "), "{text}");
    assert!(text.contains("Started run"), "{text}");
    let out = sb
        .modix()
        .args(["go", "--workflow", "review", "Fix it"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
}

#[test]
fn an_fsm_file_linked_out_of_the_project_is_never_read() {
    let sb = gated();
    let secret = sb.dir.path().join("outside.toml");
    std::fs::write(&secret, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    std::os::unix::fs::symlink(&secret, sb.root().join(".modix/fsm/evil.toml")).unwrap();
    for args in [&["validate"][..], &["fsm", "check"], &["go", "Fix it"]] {
        let out = sb.modix().args(args).output().unwrap();
        let text = output_text(&out);
        assert!(
            !text.contains("root:x:0:0"),
            "{args:?} printed the outside file:\n{text}"
        );
        if args[0] != "go" {
            assert!(text.contains(".modix/fsm/evil.toml"), "{args:?}:\n{text}");
            assert_eq!(out.status.code(), Some(2), "{args:?}:\n{text}");
        }
    }
}
