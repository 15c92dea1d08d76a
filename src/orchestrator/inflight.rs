//! The invocation in flight: what modix knows of the agent running right now,
//! kept in a small file beside the run (`.modix/runs/<run>/inflight.json`)
//! instead of the database. The step that ends the invocation records it
//! whole in one transaction; until then this file is how a later modix —
//! resuming after a crash — learns which process group to stop and what to
//! record as abandoned. It is written once per invocation, the moment the
//! process exists, and never fsynced: if the machine loses power, the
//! process is gone too.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::fsm::Lifecycle;
use crate::shell::process_start_ticks;
use crate::store::{InvocationStatus, NewInvocation, ProcessIds};

/// An agent invocation between its start and its step's commit. Texts are
/// redacted: the file sits in the run's folder.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct InFlight {
    /// The seq of the step it belongs to: once the run has that transition,
    /// the invocation is on record and this file is stale.
    pub seq: u32,
    pub state: String,
    pub agent: String,
    pub attempt: u32,
    pub lifecycle_fsm: String,
    pub argv: Vec<String>,
    pub prompt: String,
    pub started_at: String,
    pub process: Option<ProcessIds>,
}

impl InFlight {
    pub fn path(run_dir: &Path) -> PathBuf {
        run_dir.join("inflight.json")
    }

    /// Notes the started process. A failure to write is logged, not fatal:
    /// the run goes on; only a crash recovery would miss the process group.
    pub fn write(&self, path: &Path) {
        let text = serde_json::to_vec(self).unwrap_or_default();
        if let Err(e) = super::invoke::overwrite(path, &text) {
            tracing::warn!("cannot note the running agent in {}: {e}", path.display());
        }
    }

    /// The file's invocation, if there is one (a broken file counts as none).
    pub fn read(path: &Path) -> Option<InFlight> {
        let text = std::fs::read(path).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// The invocation as recorded when its run stopped while it ran.
    pub fn abandoned(self, context: serde_json::Value, lifecycle: &Lifecycle) -> NewInvocation {
        let start = lifecycle.start_step().clone();
        let end = lifecycle.abandoned_step(&start.2);
        NewInvocation {
            state: self.state,
            agent: self.agent,
            attempt: self.attempt,
            lifecycle_fsm: self.lifecycle_fsm,
            lifecycle: vec![start, end],
            argv: self.argv,
            prompt: self.prompt,
            context,
            started_at: self.started_at,
            process: self.process,
            error: None,
            status: InvocationStatus::Abandoned,
            outcome: None,
            exit_code: None,
            signal: None,
            timed_out: false,
            duration_ms: None,
            stdout: Vec::new(),
            stderr: Vec::new(),
            stdout_bytes: 0,
            stderr_bytes: 0,
            parsed_output: None,
            validation_errors: Vec::new(),
            class: None,
            reason: None,
            usage: None,
            changes: None,
            retry: None,
            texts: None,
        }
    }
}

/// Stops what is left of a crashed run's agent: its whole process group,
/// TERM, then KILL after `grace` — but only while the group's leader is
/// still the process that was started (a reused pid belongs to someone
/// else), or the leader is gone and its group lives on (its children).
/// Returns whether anything was signalled.
pub(super) fn stop_orphan(process: ProcessIds, grace: Duration) -> bool {
    let Ok(raw) = i32::try_from(process.pgid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    let leader_is_ours = match process_start_ticks(process.pgid) {
        Some(started) => started == process.started,
        // The leader is gone: whatever is left in the group is its children.
        None => true,
    };
    let group = Pid::from_raw(raw);
    if !leader_is_ours || killpg(group, None).is_err() {
        return false;
    }
    tracing::warn!(
        pgid = raw,
        "stopping the agent a crashed modix left running"
    );
    let _ = killpg(group, Signal::SIGTERM);
    let now = Instant::now();
    let deadline = now
        .checked_add(grace)
        .unwrap_or(now + Duration::from_secs(86_400));
    while Instant::now() < deadline && killpg(group, None).is_ok() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = killpg(group, Signal::SIGKILL);
    true
}
