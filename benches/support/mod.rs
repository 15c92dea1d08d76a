//! What the benchmarks that drive the real binary share: a project whose
//! one command agent is fired in a bounded loop, written as `modix init`
//! would lay it out.

use std::path::Path;

/// Writes a valid project at `root`: `.modix/` with one agent `worker`
/// running `command` (a TestResult on stdout) in workflow `id`, whose WORK
/// state fires `loops` more times after the first before its bound ends the
/// run in DONE.
pub fn loop_project(root: &Path, id: &str, command: serde_json::Value, loops: u32) {
    let agents = serde_json::json!({
        "agents": {"worker": {
            "role": "worker",
            "command": command,
            "manifest": {"output_schema": "test_result"}
        }}
    });
    let projects = serde_json::json!({
        "name": "bench", "workflow": id, "description": "A benchmark project."
    });
    let files = [
        (".modix/version.json", r#"{"format": "1.0.0"}"#.to_owned()),
        (".modix/shells.json", r#"{"shells": {}}"#.to_owned()),
        (".modix/brains.json", r#"{"brains": {}}"#.to_owned()),
        (".modix/agents.json", agents.to_string()),
        (".modix/runtimes.json", "{}".to_owned()),
        (".modix/projects.json", projects.to_string()),
        (".modix/state.json", "{}".to_owned()),
        (&format!(".modix/fsm/{id}.toml"), loop_workflow(id, loops)),
        // What `modix init` ignores: the store and the runs' local files.
        (
            ".modix/.gitignore",
            "modix.db\nmodix.db-*\nruns/\nstate.json\n".to_owned(),
        ),
        (
            "README.md",
            "A project for modix's benchmarks.\n".to_owned(),
        ),
    ];
    for (rel, text) in files {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
}

/// A workflow firing agent `worker` in WORK `loops` more times after the
/// first, then DONE.
fn loop_workflow(id: &str, loops: u32) -> String {
    format!(
        r#"id = "{id}"
version = "1.0.0"
description = "A benchmark: one agent, fired in a bounded loop."
initial = "INIT"

[states.INIT]
kind = "input"
event = "go"

[states.WORK]
kind = "agent"
agent = "worker"
output = "test_result"
emit = [
  {{ on = "output", when = "passed == true", event = "again" }},
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
to = "WORK"

[[transitions]]
from = "WORK"
event = "again"
to = "WORK"
max = {loops}
exhausted = "DONE"

[[transitions]]
from = "WORK"
event = "stop"
to = "DONE"
"#
    )
}
