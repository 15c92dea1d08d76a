//! What the benchmarks share: bench projects laid out as `modix init` would,
//! and a workflow that fires one agent in a bounded loop (or once).

// Each benchmark is a crate of its own and uses a part of this.
#![allow(dead_code)]

use std::path::Path;

/// Writes `files` (paths relative to `root`), making their folders.
pub fn write_files(root: &Path, files: &[(&str, String)]) {
    for (name, text) in files {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
}

/// The `.modix/` files every bench project has: project `name` running
/// `workflow`, with the agents of `agents` (the text of agents.json).
pub fn common_files(name: &str, workflow: &str, agents: String) -> Vec<(&'static str, String)> {
    vec![
        (".modix/version.json", r#"{"format": "1.0.0"}"#.into()),
        (".modix/shells.json", r#"{"shells": {}}"#.into()),
        (".modix/brains.json", r#"{"brains": {}}"#.into()),
        (".modix/agents.json", agents),
        (".modix/runtimes.json", "{}".into()),
        (
            ".modix/projects.json",
            format!(
                r#"{{"name": "{name}", "workflow": "{workflow}",
                    "description": "A benchmark project."}}"#
            ),
        ),
        (".modix/state.json", "{}".into()),
    ]
}

/// A workflow whose agent state `WORK` (agent `agent`, a TestResult)
/// fires `loops` more times after the first, then ends in DONE — or once
/// (`None`) — after `before` (states and transitions leading to `first`
/// from INIT's `go`).
pub fn loop_workflow(
    id: &str,
    agent: &str,
    loops: Option<u32>,
    first: &str,
    before: &str,
) -> String {
    let (again, repeat) = match loops {
        None => ("", String::new()),
        Some(max) => (
            "\n  { on = \"output\", when = \"passed == true\", event = \"again\" },",
            format!(
                "\n[[transitions]]\nfrom = \"WORK\"\nevent = \"again\"\nto = \"WORK\"\n\
                 max = {max}\nexhausted = \"DONE\"\n"
            ),
        ),
    };
    format!(
        r#"id = "{id}"
version = "1.0.0"
description = "A benchmark: one agent, fired in a bounded loop or once."
initial = "INIT"

[states.INIT]
kind = "input"
event = "go"
{before}
[states.WORK]
kind = "agent"
agent = "{agent}"
output = "test_result"
emit = [{again}
  {{ on = "output", event = "stop" }},
  {{ on = "invalid_output", event = "stop" }},
  {{ on = "process_error", event = "stop" }},
  {{ on = "timeout", event = "stop" }},
]

[states.DONE]
kind = "terminal"
outcome = "success"

[[transitions]]
from = "INIT"
event = "go"
to = "{first}"
{repeat}
[[transitions]]
from = "WORK"
event = "stop"
to = "DONE"
"#
    )
}

/// A project at `root` whose one agent `worker` runs `command` (printing
/// a TestResult) in workflow `id`, `loops` more times after the first; with
/// the `.gitignore` `modix init` writes and a README, ready to be a git
/// repository.
pub fn loop_project(root: &Path, id: &str, command: serde_json::Value, loops: u32) {
    let agents = serde_json::json!({
        "agents": {"worker": {
            "role": "worker",
            "command": command,
            "manifest": {"output_schema": "test_result"}
        }}
    });
    let mut files = common_files("bench", id, agents.to_string());
    let fsm = format!(".modix/fsm/{id}.toml");
    files.extend([
        (
            fsm.as_str(),
            loop_workflow(id, "worker", Some(loops), "WORK", ""),
        ),
        (
            ".modix/.gitignore",
            "modix.db\nmodix.db-*\nruns/\nstate.json\n".to_owned(),
        ),
        (
            "README.md",
            "A project for modix's benchmarks.\n".to_owned(),
        ),
    ]);
    write_files(root, &files);
}
