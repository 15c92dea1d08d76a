//! Walking a workflow: each agent state invokes its agent as a real process,
//! the validated output becomes an event through the state's emit rules, the
//! FSM fires, and the step is committed to the store in one transaction before
//! the next begins — so a run interrupted at any instant resumes from its last
//! recorded state, repeating nothing recorded as done.

mod agent;
mod context;
mod history;
mod invoke;
mod lifecycle;
mod observer;
mod outcome;
mod retry;
mod workspace;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

pub use agent::Verdict;
pub use context::{ContextPackage, render_prompt};
pub use observer::{Observer, RunReport, Silent};

use crate::config::{Config, MODIX_DIR};
use crate::fsm::{Catalog, Fired, Machine, Outcome, Position, StateKind};
use crate::fsutil::write_replace;
use crate::project::LoadedProject;
use crate::shell::Redactor;
use crate::store::{
    NewMessage, NewRun, NewTransition, Run, RunStatus, Step, Store, StoreError, TransitionRecord,
};

#[derive(Debug, thiserror::Error)]
pub enum OrchestratorError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Workflow(String),
    /// The run cannot be resumed (it ended, or its workflow is gone or changed).
    #[error("{0}")]
    NotResumable(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Agent(String),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// How to run.
#[derive(Default, Clone)]
pub struct RunOptions {
    pub workflow: Option<String>,
    /// Stream agents' output to stderr as it comes.
    pub stream: bool,
}

/// The database of a project.
pub fn db_path(config: &Config) -> PathBuf {
    config.paths.modix_dir.join("modix.db")
}

/// Starts a new run of `epic` and drives it to a terminal state (or an interrupt).
pub fn start(
    project: &LoadedProject,
    epic: &str,
    opts: &RunOptions,
    observer: &mut dyn Observer,
) -> Result<RunReport, OrchestratorError> {
    let machine = project
        .workflow(opts.workflow.as_deref())
        .map_err(OrchestratorError::Workflow)?;
    let mut store = Store::open(&db_path(&project.config))?;
    let run = store.create_run(&NewRun {
        epic: epic.to_owned(),
        workflow_id: machine.id().to_owned(),
        workflow_version: machine.version().to_string(),
        workflow_hash: machine.content_hash().to_owned(),
        initial_state: machine.state(machine.initial()).name.clone(),
        workdir: String::new(),
    })?;
    store.claim_run(&run.id, std::process::id())?;
    observer.run_started(&run.id, machine.id(), false);
    drive(project, machine, store, run, opts, observer)
}

/// Continues an interrupted run from its last recorded state.
pub fn resume(
    project: &LoadedProject,
    run_ref: &str,
    opts: &RunOptions,
    observer: &mut dyn Observer,
) -> Result<RunReport, OrchestratorError> {
    let mut store = Store::open(&db_path(&project.config))?;
    let run = store.run(run_ref)?;
    if run.status.is_terminal() {
        return Err(OrchestratorError::NotResumable(format!(
            "run {} already ended ({}, in {}); nothing to resume",
            run.id, run.status, run.current_state
        )));
    }
    let machine = project
        .catalog
        .get(&run.workflow_id)
        .cloned()
        .ok_or_else(|| {
            OrchestratorError::NotResumable(format!(
                "run {} used workflow `{}`, which is no longer defined",
                run.id, run.workflow_id
            ))
        })?;
    if machine.content_hash() != run.workflow_hash {
        return Err(OrchestratorError::NotResumable(format!(
            "workflow `{}` changed since run {} started (recorded {} {}, now {} {}); resuming under different rules would make its history a lie",
            run.workflow_id,
            run.id,
            run.workflow_version,
            short(&run.workflow_hash),
            machine.version(),
            short(machine.content_hash())
        )));
    }
    store.claim_run(&run.id, std::process::id())?;
    store.abandon_open_invocations(&run.id)?;
    store.set_status(&run.id, RunStatus::Running, Some("resumed"))?;
    observer.run_started(&run.id, machine.id(), true);
    drive(project, machine, store, run, opts, observer)
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

fn drive(
    project: &LoadedProject,
    machine: Arc<Machine>,
    store: Store,
    run: Run,
    opts: &RunOptions,
    observer: &mut dyn Observer,
) -> Result<RunReport, OrchestratorError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(OrchestratorError::Runtime)?;
    runtime.block_on(async {
        let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
        // Ctrl-C or SIGTERM: stop the agent's process group, record, exit 130.
        let signals = tokio::spawn(async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(_) => return,
                };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            let _ = cancel_tx.send(true);
        });
        let mut driver = Driver {
            config: &project.config,
            catalog: &project.catalog,
            machine,
            store,
            run,
            redactor: agent::redactor(&project.config),
            cancel: cancel_rx,
            stream: opts.stream,
            started: Instant::now(),
            history: Vec::new(),
            state_write: None,
        };
        let result = driver.go(observer).await;
        driver.flush_state_file().await;
        signals.abort();
        let report = match result {
            Ok(report) => report,
            Err(e) => {
                // Leave the run resumable rather than stuck "running" under a dead owner.
                let _ = driver.store.set_status(
                    &driver.run.id,
                    RunStatus::Interrupted,
                    Some(&e.to_string()),
                );
                let _ = driver.store.release_run(&driver.run.id, std::process::id());
                return Err(e);
            }
        };
        let _ = driver.store.release_run(&driver.run.id, std::process::id());
        observer.run_finished(&report);
        Ok(report)
    })
}

struct Driver<'a> {
    config: &'a Config,
    catalog: &'a Catalog,
    machine: Arc<Machine>,
    store: Store,
    run: Run,
    redactor: Redactor,
    cancel: tokio::sync::watch::Receiver<bool>,
    stream: bool,
    started: Instant,
    /// The run's recorded transitions, kept in step with the store.
    history: Vec<TransitionRecord>,
    /// The `state.json` write still in flight.
    state_write: Option<tokio::task::JoinHandle<()>>,
}

impl Driver<'_> {
    async fn go(&mut self, observer: &mut dyn Observer) -> Result<RunReport, OrchestratorError> {
        self.history = self.store.transitions(&self.run.id)?;
        let mut pos = history::replay(&self.machine, &self.history)?;
        if self.history.is_empty() {
            let initial = self.machine.state(pos.state());
            for name in &initial.on_enter {
                observer.notification(&self.run.id, &initial.name, name);
            }
        }
        let workdir = self.workdir()?;
        loop {
            if *self.cancel.borrow() {
                return self.interrupted("interrupted before the next step");
            }
            let state = self.machine.state(pos.state());
            let step =
                match &state.kind {
                    StateKind::Terminal { .. } => return Ok(self.report(&state.name.clone(), None)),
                    StateKind::Input { event } => {
                        let fired = self.fire(&pos, event)?;
                        let epic = json!({ "epic": self.run.epic });
                        let messages = vec![NewMessage {
                            kind: "epic".into(),
                            state: state.name.clone(),
                            payload: epic,
                        }];
                        (fired, None, messages, "epic received".to_owned(), None)
                    }
                    StateKind::Agent(a) => {
                        let a = a.clone();
                        match self.invoke(&pos, &a, &workdir, observer).await? {
                            Some(step) => step,
                            None => return self.interrupted(
                                "interrupted while an agent ran; resume repeats that invocation",
                            ),
                        }
                    }
                };
            let (fired, invocation, messages, mut reason, agent_id) = step;
            if fired.redirected {
                reason = format!(
                    "{reason}; `{}` already fired {} time(s), its bound — redirected to {}",
                    fired.event,
                    fired.max.unwrap_or(0),
                    self.machine.state(fired.to).name
                );
            }
            let machine = Arc::clone(&self.machine);
            let to = machine.state(fired.to);
            let status = status_in(&to.kind);
            let from_name = self.machine.state(fired.from).name.clone();
            let record = self.store.record_step(
                &self.run.id,
                &Step {
                    invocation,
                    messages,
                    transition: NewTransition {
                        from: from_name.clone(),
                        event: fired.event.clone(),
                        to: to.name.clone(),
                        attempt: history::visits(&self.machine, &self.history, fired.from),
                        bound: self.machine.bound_for_visits(fired.from).map(|b| b as u32),
                        agent: agent_id,
                        reason: Some(reason),
                        redirected: fired.redirected,
                    },
                    run_status: status,
                },
            )?;
            self.write_state_file(&to.name, status);
            observer.transition(&self.run.id, &record);
            for name in &to.on_enter {
                observer.notification(&self.run.id, &to.name, name);
            }
            self.history.push(record);
            pos = fired.position;
        }
    }

    fn fire(&self, pos: &Position, event: &str) -> Result<Fired, OrchestratorError> {
        self.machine
            .fire(pos, event)
            .map_err(|e| OrchestratorError::Workflow(e.to_string()))
    }

    fn workdir(&mut self) -> Result<PathBuf, OrchestratorError> {
        let paths = &self.config.paths;
        let dir = workspace::prepare(paths, self.config.project.workspace, &self.run.id).map_err(
            |source| OrchestratorError::Io {
                what: "cannot prepare the run's workspace".into(),
                source,
            },
        )?;
        let shown = dir.display().to_string();
        if self.run.workdir != shown {
            self.store.set_workdir(&self.run.id, &shown)?;
            self.run.workdir = shown;
        }
        Ok(dir)
    }

    fn interrupted(&mut self, why: &str) -> Result<RunReport, OrchestratorError> {
        self.store.abandon_open_invocations(&self.run.id)?;
        self.store
            .set_status(&self.run.id, RunStatus::Interrupted, Some(why))?;
        let state = self.store.run(&self.run.id)?.current_state;
        self.write_state_file(&state, RunStatus::Interrupted);
        let mut report = self.report(&state, Some(why.to_owned()));
        report.status = RunStatus::Interrupted.to_string();
        Ok(report)
    }

    fn report(&self, final_state: &str, reason: Option<String>) -> RunReport {
        let status = self
            .machine
            .state_id(final_state)
            .map_or(RunStatus::Running, |s| {
                status_in(&self.machine.state(s).kind)
            });
        RunReport {
            run_id: self.run.id.clone(),
            workflow: self.machine.id().to_owned(),
            epic: self.run.epic.clone(),
            status: status.to_string(),
            final_state: final_state.to_owned(),
            transitions: self.history.len(),
            duration_ms: self.started.elapsed().as_millis() as u64,
            reason,
        }
    }

    /// `state.json`: a pointer for humans and scripts; SQLite stays the truth.
    /// Rewrites `state.json` in the background, while the next agent runs:
    /// creating the temp file costs as much as a commit on some disks, and no
    /// agent reads it. Writes stay in order: each waits for the one before.
    fn write_state_file(&mut self, state: &str, status: RunStatus) {
        let v = json!({
            "run": self.run.id,
            "workflow": self.machine.id(),
            "state": state,
            "status": status.to_string(),
            "updated_at": jiff::Timestamp::now().to_string(),
        });
        let text = serde_json::to_string_pretty(&v).unwrap_or_default() + "\n";
        let path = self.config.paths.file("state.json");
        let previous = self.state_write.take();
        self.state_write = Some(tokio::spawn(async move {
            if let Some(previous) = previous {
                let _ = previous.await;
            }
            let written =
                tokio::task::spawn_blocking(move || write_replace(&path, text.as_bytes())).await;
            if let Ok(Err(e)) = written {
                tracing::warn!("cannot update {MODIX_DIR}/state.json: {e}");
            }
        }));
    }

    /// Waits for the last `state.json` write.
    async fn flush_state_file(&mut self) {
        if let Some(write) = self.state_write.take() {
            let _ = write.await;
        }
    }
}

/// The run's status while it is in a state of this kind.
fn status_in(kind: &StateKind) -> RunStatus {
    match kind {
        StateKind::Terminal {
            outcome: Outcome::Success,
        } => RunStatus::Succeeded,
        StateKind::Terminal { .. } => RunStatus::Failed,
        _ => RunStatus::Running,
    }
}

fn write_file(path: &std::path::Path, bytes: &[u8]) -> Result<(), OrchestratorError> {
    write_replace(path, bytes).map_err(|source| OrchestratorError::Io {
        what: format!("cannot write {}", path.display()),
        source,
    })
}
