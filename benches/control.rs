//! How fast a running run acknowledges `modix stop` from another process.
//!
//! Starts the real binary on a workflow whose agent sleeps, waits until the
//! agent runs, then times `modix stop --now` (the stop command returns once
//! the run marked the request taken) and the run's exit. Repeated, medians.
//!
//! Run: `cargo bench --bench control` (MODIX_BENCH_RUNS=N for more rounds).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let rounds: usize = std::env::var("MODIX_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let bin = env!("CARGO_BIN_EXE_modix");
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("project");
    write_project(&root);
    let (mut ack, mut exit) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let mut go = Command::new(bin)
            .args(["-q", "go", "bench"])
            .current_dir(&root)
            .env("MODIX_HOME", tmp.path().join("home"))
            .env("MODIX_SKIP_READINESS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("go");
        let flag = root.join("started");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !flag.exists() {
            assert!(Instant::now() < deadline, "the agent never started");
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = std::fs::remove_file(&flag);
        let asked = Instant::now();
        let out = Command::new(bin)
            .args(["stop", "last", "--now"])
            .current_dir(&root)
            .env("MODIX_HOME", tmp.path().join("home"))
            .output()
            .expect("stop");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ack.push(asked.elapsed());
        go.wait().expect("wait");
        exit.push(asked.elapsed());
    }
    println!("modix stop benchmark ({rounds} rounds; medians)");
    println!(
        "  `modix stop --now` returns (the run acknowledged)  {:>8.1} ms",
        ms(median(&mut ack))
    );
    println!(
        "  the run's process has exited                        {:>8.1} ms",
        ms(median(&mut exit))
    );
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A project whose only agent notes it started and sleeps.
fn write_project(root: &Path) {
    let agent = format!(
        r#"{{"agents": {{"worker": {{"role": "worker", "command": ["sh", "-c", "touch {}; sleep 60"],
            "manifest": {{"output_schema": "any"}}}}}}}}"#,
        root.join("started").display()
    );
    let files: [(&str, &str); 7] = [
        ("version.json", r#"{"format": "1.0.0"}"#),
        ("shells.json", r#"{"shells": {}}"#),
        ("brains.json", r#"{"brains": {}}"#),
        ("agents.json", &agent),
        ("runtimes.json", "{}"),
        (
            "projects.json",
            r#"{"name": "bench", "workflow": "sleepy"}"#,
        ),
        (
            "fsm/sleepy.toml",
            r#"id = "sleepy"
version = "1.0.0"
initial = "INIT"

[states.INIT]
kind = "input"
event = "go"

[states.WORK]
kind = "agent"
agent = "worker"
output = "any"
emit = [
  { on = "output", event = "done" },
  { on = "invalid_output", event = "done" },
  { on = "process_error", event = "done" },
  { on = "timeout", event = "done" },
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
event = "done"
to = "DONE"
"#,
        ),
    ];
    for (name, text) in files {
        let path = root.join(".modix").join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
}
