//! The engine's own cost per transition, beside the floor it stands on.
//!
//! Every agent-invoking, durably recorded transition must at least spawn a
//! process, read its JSON, insert a row and commit (WAL, synchronous=FULL).
//! This measures that floor and its parts, then real `modix` runs of a
//! workflow that fires one trivial command agent in a bounded loop, and of one
//! that fires it once, all in the same process so neighbour load hits them
//! alike. It reports medians, and the engine's cost as ratios to the floor:
//! per step (the long run's time less the short one's, per extra step) and
//! amortised (the long run's time per transition, its start-up included —
//! the workspace is made once per run).
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
    // Run workspaces go under the modix home: keep them in the temp dir.
    // SAFETY: set before any thread is started.
    unsafe { std::env::set_var("MODIX_HOME", tmp.path().join("home")) };
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
    let mut short = Samples::default();
    // Interleaved, one engine run then as many samples of each floor, so
    // neighbour load drifting over the minutes hits every figure alike.
    for round in 0..=runs {
        let warm_up = round == 0;
        let t = Instant::now();
        let transitions = project.run("bench_loop", "benchmark");
        assert_eq!(transitions as usize, per_run);
        engine.add(t.elapsed(), warm_up);
        short.time(warm_up, || {
            assert_eq!(project.run("bench_once", "benchmark"), 2);
        });
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
    let (floor, long, once) = (floor.median(), engine.median(), short.median());
    let amortised = long / per_run as u32;
    // The long run has per_run - 2 more agent steps than the short one.
    let per_step = long.saturating_sub(once) / (per_run as u32 - 2);
    let start_up = once.saturating_sub(per_step * 2);

    println!(
        "modix transition benchmark ({runs} runs of {per_run} transitions and of 2, interleaved; medians)"
    );
    let line = |what: &str, d: Duration| println!("  {what:<44}{:>9.1} µs", us(d));
    line("bare spawn (echo)", spawn.median());
    line(
        "modix's runner spawn (process group, caps)",
        runner.median(),
    );
    line("bare SQLite insert + commit (WAL, FULL)", commit.median());
    line("floor: spawn + parse JSON + insert + commit", floor);
    line("modix: one more agent step", per_step);
    line("modix: a run's start and end (workspace…)", start_up);
    line("modix: one transition, start-up amortised", amortised);
    let ratio = |d: Duration| d.as_secs_f64() / floor.as_secs_f64();
    println!(
        "  ratio per step / floor                      {:>9.2}×  (engine overhead {:+.1} µs per step)",
        ratio(per_step),
        us(per_step) - us(floor)
    );
    println!(
        "  ratio amortised / floor                     {:>9.2}×  (over {per_run} transitions)",
        ratio(amortised)
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
    let files: [(&str, String); 9] = [
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
        (
            "fsm/bench_once.toml",
            r#"id = "bench_once"
version = "1.0.0"
description = "The same agent, fired once: a run's fixed cost."
initial = "INIT"

[states.INIT]
kind = "input"
event = "go"

[states.WORK]
kind = "agent"
agent = "worker"
output = "test_result"
emit = [
  { on = "output", event = "stop" },
  { on = "invalid_output", event = "stop" },
  { on = "process_error", event = "stop" },
  { on = "timeout", event = "stop" },
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
event = "stop"
to = "DONE"
"#
            .into(),
        ),
    ];
    for (name, text) in files {
        let path = root.join(".modix").join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
}
