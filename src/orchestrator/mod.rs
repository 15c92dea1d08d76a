//! Walking a workflow: each agent state invokes its agent as a real process,
//! the validated output becomes an event through the state's emit rules, the
//! FSM fires, and the step is committed to the store in one transaction before
//! the next begins — so a run interrupted at any instant resumes from its last
//! recorded state, repeating nothing recorded as done.
//!
//! Concurrency model: one current-thread tokio runtime per command
//! ([`Engine`]), built — with its Ctrl-C and SIGTERM listeners — before any
//! other work, so a signal during start-up is never lost. It awaits only what
//! must be waited on: agent processes, timers and signals. Store writes,
//! file writes and workspace work run synchronously on that thread between
//! awaits: they are short, must happen in order with the step, and nothing
//! else runs concurrently that they could hold up.
//!
//! Layout: [`begin`] settles a run before it is driven (start, resume,
//! fork); [`driver`] is the loop that drives it; [`cursor`] is where the run
//! stands; [`invoke`] is an agent state's turn (its [`inputs`] and
//! [`context`] package, the process from [`agent`], what the verdict leaves
//! behind from [`outcome`]); [`work`] judges what the turn changed (and,
//! with [`evidence`], whether a test command really ran its tests);
//! [`files`] are the run's files; [`events`] is what the run tells whoever
//! watches.

pub(crate) mod agent;
mod begin;
mod budget;
mod classify;
mod context;
mod control;
mod cursor;
mod driver;
mod events;
mod evidence;
mod files;
mod inflight;
mod inputs;
mod invoke;
mod outcome;
pub mod preview;
mod retry;
mod work;

pub use begin::{fork, resume, start, stop_leftovers};
pub use budget::{Ceiling, ceiling, usd};
pub use context::TemplateError;
pub use events::{ChangeSummary, EventSink, RunEvent, RunReport, SCHEMA_VERSION, Silent};
pub use work::{StepWork, check_workspace, line_counts};

use crate::error::Exit;
use crate::fsm::{Ending, FireError, StateKind};
use crate::fsutil::write_replace;
use crate::project::{Project, Workflow};
use crate::shell::Redactor;
use crate::store::{NewRun, NewTransition, Run, RunStatus, Step, Store, StoreError};
use begin::{Opened, abandon_open_invocations};
use cursor::Cursor;
use driver::{Driver, RunInfo, drive, redrive_target};
use files::RunFiles;
use invoke::{Ended, Turn};

/// Test instrumentation: where `MODIX_CRASH_AT` asks this process to die
/// (see [`crash_for_tests`]).
fn crash_point() -> Option<String> {
    std::env::var("MODIX_CRASH_AT").ok()
}

/// Dies as `kill -9` would kill it, at a point the record's crash tests
/// cannot hit reliably from outside: `MODIX_CRASH_AT=record-run` (the run's
/// workspace made, the run not yet recorded) or `commit:N` (the drive's Nth
/// step: its agent ran and its work was settled, the step not committed).
fn crash_for_tests() -> ! {
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    unreachable!("SIGKILL cannot be caught")
}

/// Why a run could not go on. The run itself is left resumable.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run cannot be resumed (it ended, or its workflow is gone or changed).
    #[error("{message}")]
    NotResumable { message: String, help: &'static str },
    /// The workflow the run needs has configuration errors.
    #[error("the run's workflow has configuration errors")]
    Config(Box<crate::diagnostics::Diagnostics>),
    #[error("the run's record does not fit its workflow: {0}")]
    Replay(String),
    /// A prompt template failed before the run was recorded (`go`'s
    /// pre-flight, a dry run): nothing was run.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// A prompt template failed in a recorded run (a later state's, or on
    /// the run's own data): the run stops there, resumable.
    #[error("{0}")]
    TemplateInRun(TemplateError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// The run's workspace could not be made, found again or updated.
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    /// A broken promise inside modix (a bug).
    #[error("internal error: {0}")]
    Internal(String),
}

impl RunError {
    fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        RunError::Io {
            what: what.into(),
            source,
        }
    }

    pub fn exit_code(&self) -> Exit {
        match self {
            RunError::Store(e) => crate::error::store_exit(e),
            RunError::NotResumable { .. } | RunError::Config(_) | RunError::Template(_) => {
                Exit::Usage
            }
            RunError::Replay(_)
            | RunError::Io { .. }
            | RunError::Runtime(_)
            | RunError::TemplateInRun(_) => Exit::Internal,
            RunError::Internal(_) => Exit::Internal,
            RunError::Workspace(e) => crate::error::workspace_exit(e),
        }
    }

    pub fn help(&self) -> Option<String> {
        let help = match self {
            RunError::Store(e) => return crate::error::store_help(e).map(str::to_owned),
            RunError::NotResumable { help, .. } => help,
            RunError::Config(_) => "run `modix validate` and fix what it reports",
            RunError::Template(_) => "fix the template; nothing was run",
            RunError::TemplateInRun(_) => {
                "fix the template, then `modix resume` continues the run from the last recorded step"
            }
            RunError::Replay(_) => "start a new run with `modix go`",
            RunError::Io { .. } | RunError::Runtime(_) => {
                "fix the cause, then `modix resume <run>` continues from the last recorded state"
            }
            RunError::Internal(_) => "this is a bug in modix; `modix resume <run>` may continue",
            RunError::Workspace(e) if e.is_environment() => {
                "mend the machine (free disk space, a quota, a file system mounted read-only), then `modix resume` continues from the last recorded step"
            }
            // Its message says what to do.
            RunError::Workspace(_) => return None,
        };
        Some(help.to_owned())
    }

    pub fn code(&self) -> &'static str {
        match self {
            RunError::Store(e) => crate::error::store_code(e),
            RunError::NotResumable { .. } => "not_resumable",
            RunError::Config(_) => "config",
            RunError::Template(_) | RunError::TemplateInRun(_) => "template",
            RunError::Replay(_) => "replay",
            RunError::Io { .. } | RunError::Runtime(_) => "io",
            RunError::Internal(_) => "internal",
            RunError::Workspace(e) => e.code(),
        }
    }
}

impl From<FireError> for RunError {
    fn from(e: FireError) -> Self {
        // Events come only from checked emit rules; a refusal is a bug.
        RunError::Internal(e.to_string())
    }
}

/// The runtime a command's runs execute on, with its signal listeners.
pub struct Engine {
    runtime: tokio::runtime::Runtime,
    cancel: tokio::sync::watch::Receiver<bool>,
}

impl Engine {
    /// Builds the runtime and registers Ctrl-C and SIGTERM at once: from
    /// here on, a signal is recorded (and the run stopped) instead of
    /// killing modix mid-write.
    pub fn new() -> Result<Engine, RunError> {
        use tokio::signal::unix::{SignalKind, signal};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(RunError::Runtime)?;
        let (tx, cancel) = tokio::sync::watch::channel(false);
        let _guard = runtime.enter();
        // Registered synchronously here; the listener runs whenever the
        // runtime does, and sees signals that arrived before it first ran.
        let mut int = signal(SignalKind::interrupt()).map_err(RunError::Runtime)?;
        let mut term = signal(SignalKind::terminate()).map_err(RunError::Runtime)?;
        // One that came before the listeners, while `main` held it.
        if crate::stops::caught() {
            let _ = tx.send(true);
        }
        runtime.spawn(async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            let _ = tx.send(true);
        });
        Ok(Engine { runtime, cancel })
    }

    /// Whether Ctrl-C or SIGTERM has arrived (the listener gets a turn first).
    pub fn interrupted(&self) -> bool {
        self.runtime.block_on(tokio::task::yield_now());
        *self.cancel.borrow()
    }

    /// Runs `f` on the engine until it ends, or until Ctrl-C or SIGTERM
    /// (`None`): then `f` is dropped, and with it the process groups it
    /// started (doctor's probes: a CLI that hangs on `--version` must not
    /// keep a stop waiting for its timeout).
    pub fn until_stopped<F: std::future::Future>(&self, f: F) -> Option<F::Output> {
        let mut cancel = self.cancel.clone();
        let out = self.runtime.block_on(async move {
            tokio::select! {
                biased;
                Ok(_) = cancel.wait_for(|stop| *stop) => None,
                out = f => Some(out),
            }
        });
        // Tasks `f` spawned were aborted as it dropped; one more turn of
        // the runtime drops them, and the processes they guard.
        self.runtime.block_on(tokio::task::yield_now());
        out
    }
}

/// The agent a run has running now, as its in-flight note says (the
/// caller checks the note is current: its `seq` is the run's next step).
#[derive(Debug, Clone, serde::Serialize)]
pub struct AgentNow {
    pub seq: u32,
    pub state: String,
    pub agent: String,
    pub attempt: u32,
    pub started_at: String,
    /// The agent's process group.
    pub pgid: Option<u32>,
}

/// See [`AgentNow`].
pub fn agent_now(paths: &crate::config::ProjectPaths, run_id: &str) -> Option<AgentNow> {
    let f = inflight::InFlight::read(&inflight::InFlight::path(&paths.run_dir(run_id)))?;
    Some(AgentNow {
        seq: f.seq,
        state: f.state,
        agent: f.agent,
        attempt: f.attempt,
        started_at: f.started_at,
        pgid: f.process.map(|p| p.pgid),
    })
}

/// How to run.
#[derive(Default, Clone)]
pub struct RunOptions {
    /// Stream agents' output to stderr as it comes.
    pub stream: bool,
    /// Worktree runs: start from this revision instead of HEAD.
    pub base: Option<String>,
    /// Worktree runs: start from the uncommitted changes too.
    pub include_dirty: bool,
    /// In-place runs: start even on uncommitted changes.
    pub allow_dirty: bool,
    /// Resume: put a moved run branch back at the last recorded step.
    pub reset: bool,
    /// A person's answer to the gate the run waits at.
    pub answer: Option<Answer>,
    /// Continue a run that ended in a failure terminal (`resume --from`).
    pub redrive: Option<Redrive>,
    /// Record the gate's answer, then stop (`approve --later`).
    pub stop_after_answer: bool,
    /// What `go` changed for the run (`project::Overrides`), recorded with
    /// it so that resuming runs the same agents.
    pub overrides: Option<serde_json::Value>,
}

/// A person's answer to a human gate: the event it raises, their note, who.
#[derive(Clone, Debug)]
pub struct Answer {
    pub event: String,
    pub note: Option<String>,
    /// `user@host`.
    pub by: String,
}

/// Taking a failed run back to a state it visited.
#[derive(Clone, Debug)]
pub struct Redrive {
    /// The state to continue from (default: the one whose failure ended it).
    pub from: Option<String>,
    pub note: Option<String>,
    pub by: String,
}
