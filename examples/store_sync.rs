//! By-hand measurement of what `synchronous=FULL` costs per recorded step
//! compared with `NORMAL`. Not a test and not a benchmark in CI: fsync cost
//! depends on the disk, so run it where the projects live.
//!
//!     cargo run --release --example store_sync -- [DIR] [STEPS]
//!
//! DIR defaults to a temporary directory (make sure it is not on tmpfs,
//! where fsync is free); STEPS defaults to 2000.

use std::path::PathBuf;
use std::time::Instant;

use modix::store::{
    InvocationEnd, InvocationStatus, NewInvocation, NewMessage, NewRun, NewTransition, Outcome,
    RunStatus, Step, Store, StoreOptions, Synchronous,
};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let tmp = tempfile::tempdir()?;
    let dir = args
        .next()
        .map_or_else(|| tmp.path().to_path_buf(), PathBuf::from);
    let steps: u32 = args.next().map_or(Ok(2000), |s| s.parse())?;
    println!("dir: {}  steps: {steps}", dir.display());
    for sync in [Synchronous::Normal, Synchronous::Full] {
        let path = dir.join(format!("modix-sync-{sync:?}.db"));
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        let options = StoreOptions {
            synchronous: sync,
            ..StoreOptions::default()
        };
        let mut store = Store::open_with(&path, &options)?;
        let run = store.create_run(&NewRun {
            epic: "measure".into(),
            workflow_id: "default".into(),
            workflow_version: "1".into(),
            workflow_hash: "h".into(),
            initial_state: "a".into(),
            workdir: dir.display().to_string(),
        })?;
        // A step without an invocation (one commit) and a full agent step
        // (start_invocation + record_step = two commits) are both timed.
        let mut plain = 0.0;
        let mut with_agent = 0.0;
        for i in 0..steps {
            let (from, to) = if i % 2 == 0 { ("a", "b") } else { ("b", "a") };
            let transition = NewTransition {
                from: from.into(),
                event: "next".into(),
                to: to.into(),
                attempt: 1,
                bound: None,
                agent: None,
                reason: None,
                redirected: false,
            };
            if i % 2 == 0 {
                let t = Instant::now();
                store.record_step(
                    &run.id,
                    &Step {
                        transition,
                        invocation: None,
                        messages: Vec::new(),
                        run_status: RunStatus::Running,
                    },
                )?;
                plain += t.elapsed().as_secs_f64();
            } else {
                let t = Instant::now();
                let inv = store.start_invocation(&NewInvocation {
                    run_id: run.id.clone(),
                    state: from.into(),
                    agent: "claude".into(),
                    attempt: 1,
                    lifecycle_fsm: "agent".into(),
                    argv: vec!["claude".into(), "-p".into()],
                    prompt: "x".repeat(2000),
                    context: json!({"i": i}),
                })?;
                let end = InvocationEnd {
                    status: InvocationStatus::Completed,
                    outcome: Some(Outcome::Output),
                    exit_code: Some(0),
                    signal: None,
                    timed_out: false,
                    duration_ms: Some(1),
                    stdout: "y".repeat(4000),
                    stderr: String::new(),
                    stdout_bytes: 4000,
                    stderr_bytes: 0,
                    parsed_output: Some(json!({"ok": true})),
                    validation_errors: Vec::new(),
                    lifecycle: vec![("EXECUTING".into(), "exit".into(), "COMPLETED".into())],
                };
                store.record_step(
                    &run.id,
                    &Step {
                        transition,
                        invocation: Some((inv, end)),
                        messages: vec![NewMessage {
                            kind: "execution_result".into(),
                            state: from.into(),
                            payload: json!({"ok": true}),
                        }],
                        run_status: RunStatus::Running,
                    },
                )?;
                with_agent += t.elapsed().as_secs_f64();
            }
        }
        let half = f64::from(steps / 2);
        println!(
            "synchronous={sync:?}: plain step {:.3} ms, agent step (2 commits) {:.3} ms",
            plain * 1000.0 / half,
            with_agent * 1000.0 / half,
        );
    }
    Ok(())
}
