//! What a run tells whoever watches it (the CLI's live lines, `--json`, tests).
//! Observers only listen: the run's record is the store, not them.

use crate::store::TransitionRecord;

/// A run's final word.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    pub run_id: String,
    pub workflow: String,
    pub epic: String,
    /// `succeeded`, `failed` or `interrupted`.
    pub status: String,
    pub final_state: String,
    pub transitions: usize,
    pub duration_ms: u64,
    pub reason: Option<String>,
}

pub trait Observer {
    fn run_started(&mut self, _run_id: &str, _workflow: &str, _resumed: bool) {}
    /// An agent is about to be invoked.
    fn agent_started(&mut self, _state: &str, _agent: &str, _attempt: u32, _bound: Option<u64>) {}
    fn transition(&mut self, _run_id: &str, _t: &TransitionRecord) {}
    /// A state's `on_enter` notification, as the run enters that state.
    fn notification(&mut self, _run_id: &str, _state: &str, _name: &str) {}
    fn run_finished(&mut self, _report: &RunReport) {}
}

/// An observer that ignores everything.
pub struct Silent;

impl Observer for Silent {}
