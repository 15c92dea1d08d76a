//! `modix history`: the record of runs, one run's transitions, one invocation.

use serde_json::json;

use super::output::table;
use super::{Ctx, Output};
use crate::error::{Error, Exit};
use crate::orchestrator::SCHEMA_VERSION;
use crate::store::{Store, StoreError};
use crate::text::one_line;

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// A run id or any unique prefix of it; without it, list runs.
    pub run: Option<String>,
    /// Show one invocation of the run (1 = its first agent invocation).
    #[arg(long, value_name = "N", requires = "run")]
    pub invocation: Option<u32>,
    /// At most this many runs, newest first.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub limit: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &Ctx, args: &HistoryArgs) -> Result<Exit, Error> {
    let paths = ctx.paths()?;
    let db = paths.db();
    if !db.exists() {
        if args.run.is_some() {
            return Err(StoreError::UnknownRun {
                prefix: args.run.clone().unwrap_or_default(),
            }
            .into());
        }
        empty_list(ctx, args.json);
        return Ok(Exit::Ok);
    }
    let store = Store::open_read_only(&db)?;
    match (&args.run, args.invocation) {
        (None, _) => list(&store, args, &ctx.out)?,
        (Some(run), None) => show_run(&store, run, args.json, &ctx.out)?,
        (Some(run), Some(n)) => show_invocation(&store, run, n, args.json, &ctx.out)?,
    }
    Ok(Exit::Ok)
}

fn empty_list(ctx: &Ctx, json: bool) {
    if json {
        ctx.out
            .json(&json!({ "schema_version": SCHEMA_VERSION, "runs": [] }));
    } else {
        ctx.out
            .line("No runs yet. Start one with `modix go \"<epic>\"`.");
    }
}

fn secs(ms: Option<u64>) -> String {
    ms.map_or("-".into(), |ms| format!("{:.1}s", ms as f64 / 1000.0))
}

fn list(store: &Store, args: &HistoryArgs, out: &Output) -> Result<(), StoreError> {
    let runs = store.runs(args.limit)?;
    if args.json {
        out.json(&json!({ "schema_version": SCHEMA_VERSION, "runs": runs }));
        return Ok(());
    }
    if runs.is_empty() {
        out.line("No runs yet. Start one with `modix go \"<epic>\"`.");
        return Ok(());
    }
    let mut t = table([
        "run",
        "started",
        "epic",
        "workflow",
        "state",
        "status",
        "duration",
        "transitions",
    ]);
    for r in &runs {
        t.add_row(vec![
            r.run.id.clone(),
            r.run
                .created_at
                .chars()
                .take(19)
                .collect::<String>()
                .replace('T', " "),
            one_line(&r.run.epic, 40),
            r.run.workflow_id.clone(),
            r.run.current_state.clone(),
            r.run.status.as_str().to_owned(),
            secs(r.duration_ms),
            r.transitions.to_string(),
        ]);
    }
    out.line(t.to_string());
    Ok(())
}

fn show_run(store: &Store, run_ref: &str, json: bool, out: &Output) -> Result<(), StoreError> {
    let run = store.run(run_ref)?;
    let transitions = store.transitions(&run.id)?;
    if json {
        let messages = store.messages(&run.id)?;
        out.json(&json!({
            "schema_version": SCHEMA_VERSION,
            "run": run,
            "transitions": transitions,
            "messages": messages,
        }));
        return Ok(());
    }
    out.line(format!(
        "Run {} — {} ({} {}), {} in {}\nEpic: {}",
        run.id,
        run.status.as_str(),
        run.workflow_id,
        run.workflow_version,
        run.current_state,
        run.status_reason
            .as_deref()
            .map(|r| format!("({r}) "))
            .unwrap_or_default(),
        run.epic
    ));
    let mut t = table([
        "seq",
        "at",
        "from → to",
        "event",
        "attempt",
        "agent",
        "reason",
    ]);
    for tr in &transitions {
        t.add_row(vec![
            tr.seq.to_string(),
            tr.at.chars().skip(11).take(12).collect(),
            format!("{} → {}", tr.from, tr.to),
            tr.event.clone(),
            match tr.bound {
                Some(b) => format!("{}/{b}", tr.attempt),
                None => tr.attempt.to_string(),
            },
            tr.agent.clone().unwrap_or_default(),
            one_line(tr.reason.as_deref().unwrap_or(""), 70),
        ]);
    }
    out.line(t.to_string());
    out.line(format!(
        "Invocations: `modix history {} --invocation N` shows one.",
        &run.id
    ));
    Ok(())
}

fn show_invocation(
    store: &Store,
    run_ref: &str,
    n: u32,
    json: bool,
    out: &Output,
) -> Result<(), StoreError> {
    let run = store.run(run_ref)?;
    let inv = store.invocation(&run.id, n)?;
    if json {
        let mut v = serde_json::to_value(&inv).unwrap_or_default();
        v["schema_version"] = SCHEMA_VERSION.into();
        out.json(&v);
        return Ok(());
    }
    let outcome = inv.outcome.map_or("-", |o| o.as_str());
    out.line(format!(
        "Invocation {n} of run {}: {} in {} (attempt {})\nstatus: {}, outcome: {outcome}, exit code: {}, timed out: {}, took {}\nargv: {}",
        run.id, inv.agent, inv.state, inv.attempt, inv.status,
        inv.exit_code.map_or("-".into(), |c| c.to_string()),
        inv.timed_out, secs(inv.duration_ms),
        serde_json::to_string(&inv.argv).unwrap_or_default()
    ));
    if let Some(error) = &inv.error {
        out.line(format!("could not start: {error}"));
    }
    if !inv.validation_errors.is_empty() {
        out.line(format!(
            "validation errors:\n  - {}",
            inv.validation_errors.join("\n  - ")
        ));
    }
    let lifecycle: Vec<String> = inv
        .lifecycle
        .iter()
        .map(|l| format!("{} —{}→ {}", l.from, l.event, l.to))
        .collect();
    out.line(format!(
        "lifecycle ({}): {}",
        inv.lifecycle_fsm,
        lifecycle.join(", ")
    ));
    out.line(format!("--- prompt ---\n{}", inv.prompt));
    out.line(format!(
        "--- stdout ({} bytes) ---\n{}",
        inv.stdout_bytes, inv.stdout
    ));
    out.line(format!(
        "--- stderr ({} bytes) ---\n{}",
        inv.stderr_bytes, inv.stderr
    ));
    if let Some(parsed) = &inv.parsed_output {
        out.line(format!(
            "--- parsed output ---\n{}",
            serde_json::to_string_pretty(parsed).unwrap_or_default()
        ));
    }
    Ok(())
}
