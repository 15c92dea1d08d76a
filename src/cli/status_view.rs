//! `modix status`: what a run is doing now — its state, the agent running
//! (from the run's in-flight note) with its attempt and how long it has
//! run, the gate it waits at with the latest outputs, its last steps and the
//! messages queued for it — and which runs are live.

use serde::Serialize;
use serde_json::Value;

use super::Output;
use super::runs;
use crate::config::ProjectPaths;
use crate::error::Error;
use crate::orchestrator::{AgentNow, SCHEMA_VERSION, agent_now};
use crate::store::{Control, ControlKind, Run, RunStatus, Store, TransitionRecord};
use crate::text::{self, escape_controls};

/// How many recent steps a view shows.
const LAST_STEPS: usize = 5;

#[derive(Debug, Serialize)]
pub(super) struct RunView {
    pub schema_version: u32,
    pub run_id: String,
    pub workflow: String,
    pub epic: String,
    pub status: RunStatus,
    /// As people should read it (`interrupted (owner gone)`, …).
    pub label: String,
    pub state: String,
    pub reason: Option<String>,
    pub owner_pid: Option<u32>,
    pub elapsed_ms: u64,
    /// The agent running now, with how long it has run.
    pub agent: Option<AgentView>,
    /// The gate's question, when the run waits at one.
    pub question: Option<String>,
    /// The latest output of every state, by state (shown at a gate).
    pub outputs: Vec<(String, Value)>,
    pub last_steps: Vec<TransitionRecord>,
    pub pending: Vec<Control>,
}

#[derive(Debug, Serialize)]
pub(super) struct AgentView {
    #[serde(flatten)]
    pub now: AgentNow,
    pub running_ms: u64,
}

/// One run's view.
pub(super) fn one(store: &Store, paths: &ProjectPaths, run: &Run) -> Result<RunView, Error> {
    let status = runs::status(run);
    let steps = store.transitions(&run.id)?;
    let next_seq = steps.last().map_or(1, |t| t.seq + 1);
    let agent = (status.status == RunStatus::Running)
        .then(|| agent_now(paths, &run.id))
        .flatten()
        .filter(|a| a.seq == next_seq)
        .map(|now| AgentView {
            running_ms: since_ms(&now.started_at),
            now,
        });
    let waiting = status.status == RunStatus::Waiting;
    let outputs = if waiting {
        store
            .latest_outputs(&run.id)?
            .into_iter()
            .map(|m| (m.state, m.payload))
            .collect()
    } else {
        Vec::new()
    };
    let skip = steps.len().saturating_sub(LAST_STEPS);
    Ok(RunView {
        schema_version: SCHEMA_VERSION,
        run_id: run.id.clone(),
        workflow: run.workflow_id.clone(),
        epic: run.epic.clone(),
        status: status.status,
        label: status.label,
        state: run.current_state.clone(),
        reason: run.status_reason.clone(),
        owner_pid: run.owner_pid,
        // A run at a gate is still under way (its process gone meanwhile).
        elapsed_ms: if status.status == RunStatus::Waiting {
            since_ms(&run.created_at)
        } else {
            runs::duration(run).unwrap_or(0)
        },
        agent,
        question: waiting.then(|| run.status_reason.clone()).flatten(),
        outputs,
        last_steps: steps.into_iter().skip(skip).collect(),
        pending: store.controls(&run.id, ControlKind::Pending)?,
    })
}

/// Every live run: running (with a live owner) or waiting at a gate.
pub(super) fn live(store: &Store, paths: &ProjectPaths) -> Result<Vec<RunView>, Error> {
    let found = store.runs_matching(&[RunStatus::Running, RunStatus::Waiting], None, None)?;
    found
        .into_iter()
        .map(|s| s.run)
        .filter(|r| {
            matches!(
                runs::status(r).status,
                RunStatus::Running | RunStatus::Waiting
            )
        })
        .map(|r| one(store, paths, &r))
        .collect()
}

fn since_ms(stored: &str) -> u64 {
    stored
        .parse::<jiff::Timestamp>()
        .ok()
        .and_then(|t| {
            jiff::Timestamp::now()
                .duration_since(t)
                .as_millis()
                .try_into()
                .ok()
        })
        .unwrap_or(0)
}

/// The human view of one run.
pub(super) fn render_one(v: &RunView, out: &Output) -> String {
    let mut s = String::new();
    let mut line = |l: String| {
        s.push_str(&l);
        s.push('\n');
    };
    let tone = runs::status_tone(v.status);
    let took = match v.status {
        RunStatus::Running | RunStatus::Waiting => "so far",
        _ => "in all",
    };
    line(format!(
        "Run {} — {} in {} ({} {took}, workflow {})",
        v.run_id,
        out.paint(&v.label, tone),
        out.paint(&v.state, tone),
        text::duration(v.elapsed_ms),
        v.workflow
    ));
    line(format!(
        "Epic: {}",
        escape_controls(&text::one_line(&v.epic, 200))
    ));
    if let Some(pid) = v.owner_pid.filter(|_| v.status == RunStatus::Running) {
        line(format!("Driven by process {pid}"));
    }
    if let Some(a) = &v.agent {
        line(format!(
            "Now: {} in {} (attempt {}), running for {}{}",
            escape_controls(&a.now.agent),
            a.now.state,
            a.now.attempt,
            text::duration(a.running_ms),
            a.now
                .pgid
                .map(|g| format!(", process group {g}"))
                .unwrap_or_default()
        ));
    }
    if let Some(q) = &v.question {
        line(format!("Waiting for you: {}", escape_controls(q)));
        line(format!(
            "  answer: modix approve {id} [--note TEXT] · modix reject {id} --note TEXT · modix answer {id} EVENT",
            id = v.run_id
        ));
        for (state, output) in &v.outputs {
            let shown = serde_json::to_string(output).unwrap_or_default();
            line(format!(
                "  {state}: {}",
                escape_controls(&text::one_line(&shown, 300))
            ));
        }
    } else if let Some(r) = v.reason.as_deref().filter(|r| *r != "resumed") {
        line(format!("Why: {}", escape_controls(r)));
    }
    if !v.last_steps.is_empty() {
        line("Last steps:".into());
        for t in &v.last_steps {
            line(format!(
                "  {:>3}. {} —{}→ {}  {}",
                t.seq,
                t.from,
                t.event,
                t.to,
                escape_controls(&text::one_line(t.reason.as_deref().unwrap_or(""), 160))
            ));
        }
    }
    let waiting: Vec<&Control> = v.pending.iter().filter(|c| c.taken_at.is_none()).collect();
    if !v.pending.is_empty() {
        line(format!(
            "Pending messages: {} queued, {} delivered",
            waiting.len(),
            v.pending.len() - waiting.len()
        ));
        for c in waiting {
            let t = c.text.as_deref().unwrap_or("");
            line(format!(
                "  #{} {}",
                c.id,
                escape_controls(&text::one_line(t, 160))
            ));
        }
    }
    s
}

/// The human view of every live run.
pub(super) fn render_live(views: &[RunView], out: &Output) -> String {
    if views.is_empty() {
        return "No live runs (none running or waiting). `modix history` lists them all.\n".into();
    }
    views
        .iter()
        .map(|v| render_one(v, out))
        .collect::<Vec<_>>()
        .join("\n")
}
