//! The engine's own cost per transition, beside the floor it stands on.
//!
//! Every agent-invoking, durably recorded transition must at least spawn a
//! process, read its JSON, insert a row and commit (WAL, synchronous=FULL).
//! This measures that floor and its parts, then a real `modix` run of a
//! workflow that fires one trivial command agent in a bounded loop, all in the
//! same process so neighbour load hits both alike; it reports medians and the
//! engine's cost as a ratio to the floor.
//!
//! Run: `cargo bench --bench transition` (MODIX_BENCH_RUNS=N for more runs).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use modix::bench::{CaptureLimits, ProcessSpec, run_process};
use rusqlite::Connection;

/// Loop bound of the benchmark workflow: one run = LOOPS + 2 transitions.
const LOOPS: u32 = 50;
const ANSWER: &str = r#"{"passed": true, "summary": "ok"}"#;

fn main() {
    let runs: usize = std::env::var("MODIX_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let per_run = LOOPS as usize + 2;
    let tmp = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let echo = which::which("echo").expect("echo on PATH");
    let conn = open_db(&tmp.path().join("floor.db"));

    let project_root = tmp.path().join("project");
    write_project(&project_root);
    let project = modix::bench::Project::load(&project_root);

    let mut spawn = Samples::default();
    let mut runner = Samples::default();
    let mut commit = Samples::default();
    let mut floor = Samples::default();
    let mut engine = Samples::default();
    // Interleaved, one engine run then as many samples of each floor, so
    // neighbour load drifting over the minutes hits every figure alike.
    for round in 0..=runs {
        let t = Instant::now();
        let transitions = project.run("bench_loop", "benchmark");
        assert_eq!(transitions as usize, per_run);
        let warm_up = round == 0;
        engine.add(t.elapsed() / per_run as u32, warm_up);
        for _ in 0..per_run {
            spawn.time(warm_up, || {
                let out = Command::new("echo")
                    .arg(ANSWER)
                    .stdin(Stdio::null())
                    .output()
                    .expect("spawn");
                assert!(out.status.success());
            });
            runner.time(warm_up, || {
                let out = runtime
                    .block_on(run_process(echo_spec(&echo, tmp.path()), cancel.clone()))
                    .expect("spawn");
                assert!(out.success());
            });
            commit.time(warm_up, || insert_commit(&conn, "{}"));
            floor.time(warm_up, || {
                let out = Command::new("echo")
                    .arg(ANSWER)
                    .stdin(Stdio::null())
                    .output()
                    .expect("spawn");
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
                insert_commit(&conn, &v.to_string());
            });
        }
    }
    let (floor, per_transition) = (floor.median(), engine.median());

    println!(
        "modix transition benchmark ({runs} runs of {per_run} transitions, interleaved; medians)"
    );
    println!(
        "  bare spawn (echo)                           {:>9.1} µs",
        us(spawn.median())
    );
    println!(
        "  modix's runner spawn (process group, caps)  {:>9.1} µs",
        us(runner.median())
    );
    println!(
        "  bare SQLite insert + commit (WAL, FULL)     {:>9.1} µs",
        us(commit.median())
    );
    println!(
        "  floor: spawn + parse JSON + insert + commit {:>9.1} µs",
        us(floor)
    );
    println!(
        "  modix: one agent-invoking transition        {:>9.1} µs",
        us(per_transition)
    );
    println!(
        "  ratio modix / floor                         {:>9.2}×  (engine overhead {:+.1} µs per transition)",
        per_transition.as_secs_f64() / floor.as_secs_f64(),
        us(per_transition) - us(floor)
    );
}

/// Timings of one measurement; warm-up samples are dropped.
#[derive(Default)]
struct Samples(Vec<Duration>);

impl Samples {
    fn add(&mut self, d: Duration, warm_up: bool) {
        if !warm_up {
            self.0.push(d);
        }
    }

    fn time(&mut self, warm_up: bool, f: impl FnOnce()) {
        let t = Instant::now();
        f();
        self.add(t.elapsed(), warm_up);
    }

    fn median(&mut self) -> Duration {
        self.0.sort_unstable();
        self.0[self.0.len() / 2]
    }
}

fn echo_spec(echo: &Path, cwd: &Path) -> ProcessSpec {
    ProcessSpec {
        program: echo.to_path_buf(),
        args: vec![ANSWER.into()],
        cwd: cwd.to_path_buf(),
        env: vec![],
        stdin: None,
        timeout: Duration::from_secs(10),
        idle_timeout: None,
        kill_grace: Duration::from_secs(1),
        capture: CaptureLimits::default(),
        echo: None,
        on_spawn: None,
        watch: None,
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn open_db(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("open");
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
         CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT NOT NULL);",
    )
    .expect("schema");
    conn
}

fn insert_commit(conn: &Connection, payload: &str) {
    conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
    conn.execute("INSERT INTO t (payload) VALUES (?1)", [payload])
        .expect("insert");
    conn.execute_batch("COMMIT").expect("commit");
}

fn write_project(root: &Path) {
    let files: [(&str, String); 8] = [
        ("version.json", r#"{"format": "1.0.0"}"#.into()),
        ("shells.json", r#"{"shells": {}}"#.into()),
        ("brains.json", r#"{"brains": {}}"#.into()),
        (
            "agents.json",
            format!(
                r#"{{"agents": {{"worker": {{"role": "worker", "command": ["echo", {}],
                    "manifest": {{"output_schema": "test_result"}}}}}}}}"#,
                serde_json::to_string(ANSWER).expect("json")
            ),
        ),
        ("runtimes.json", "{}".into()),
        (
            "projects.json",
            r#"{"name": "bench", "workflow": "bench_loop"}"#.into(),
        ),
        ("state.json", "{}".into()),
        (
            "fsm/bench_loop.toml",
            format!(
                r#"id = "bench_loop"
version = "1.0.0"
description = "One trivial command agent, fired in a bounded loop."
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
max = {LOOPS}
exhausted = "DONE"

[[transitions]]
from = "WORK"
event = "stop"
to = "DONE"
"#
            ),
        ),
    ];
    for (name, text) in files {
        let path = root.join(".modix").join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
}
