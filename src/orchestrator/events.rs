//! What a run tells whoever watches it. One event type, [`RunEvent`], is
//! what the terminal view, `go --json` (each event serialised as one line)
//! and the logs all consume, so they cannot drift apart. Sinks only listen:
//! the run's record is the store, not them.

use std::path::PathBuf;

use serde::Serialize;

use crate::store::{RunStatus, TransitionRecord};
use crate::workspace::Mode;

/// Where a fork branched off: its source run and the step it copied up to.
#[derive(Debug, Clone, Serialize)]
pub struct ForkPoint {
    pub run_id: String,
    pub seq: u32,
}

/// Version of the `--json` event vocabulary; bumped when a field changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

/// Something that happened in a run. Field names are shared with `history
/// --json`: `run_id` for the run, `state` for where it is.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    RunStarted {
        run_id: String,
        workflow: String,
        resumed: bool,
        /// At a fork's first drive: the run and step it branched from.
        #[serde(skip_serializing_if = "Option::is_none")]
        forked_from: Option<ForkPoint>,
    },
    /// The run's workspace is ready: where the agents work, on which branch,
    /// from which commit, and what the user should know about it.
    Workspace {
        run_id: String,
        mode: Mode,
        workdir: PathBuf,
        branch: Option<String>,
        base: String,
        notes: Vec<String>,
    },
    /// An attempt failed with a class its state retries: it runs again
    /// after `wait_ms` (the failed attempt is on record).
    Retrying {
        run_id: String,
        state: String,
        agent: String,
        class: crate::fsm::FailureClass,
        reason: String,
        /// This retry's number (1 for the first) and the most the rule allows.
        retry: u32,
        of: u32,
        wait_ms: u64,
    },
    /// Something the user should know that is not a step (e.g. an agent
    /// moved the workspace's HEAD, and modix put it back).
    Notice { run_id: String, message: String },
    /// An agent is about to be invoked.
    AgentStarted {
        run_id: String,
        state: String,
        agent: String,
        attempt: u32,
        bound: Option<u64>,
    },
    /// A step was committed to the store.
    Transition(TransitionRecord),
    /// A state's `on_enter` notification, as the run enters that state.
    Notification {
        run_id: String,
        state: String,
        name: String,
    },
    /// The run's final word for this command: it ended, or it stopped and
    /// can be resumed.
    RunFinished(RunReport),
}

/// How a run (or this command's part of it) ended.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub run_id: String,
    pub workflow: String,
    pub epic: String,
    pub status: RunStatus,
    /// The state the run is in now.
    pub state: String,
    pub transitions: u32,
    pub duration_ms: u64,
    pub reason: Option<String>,
    /// What the run changed so far, and where it is.
    pub changes: Option<ChangeSummary>,
    /// What the run used so far, summed from its invocations' CLIs' reports.
    pub usage: Option<crate::store::RunUsage>,
}

/// The run's changes against its base, for the last word of `go`.
#[derive(Debug, Clone, Serialize)]
pub struct ChangeSummary {
    pub mode: Mode,
    /// The branch holding the run's commits (in the user's repository for
    /// worktree runs, in the copy's own for copy runs).
    pub branch: Option<String>,
    /// What `modix diff` / `modix apply` accept for this run.
    pub short_id: String,
    pub workdir: PathBuf,
    pub files: usize,
    pub added: u64,
    pub removed: u64,
}

/// Where a run's events go.
pub trait EventSink {
    fn event(&mut self, event: &RunEvent);
}

/// A sink that ignores everything (benchmarks, tests).
pub struct Silent;

impl EventSink for Silent {
    fn event(&mut self, _event: &RunEvent) {}
}
