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
//! Layout: [`cursor`] is where the run stands; [`invoke`] is an agent state's
//! turn (its [`context`] package, the process from [`agent`], what the
//! verdict leaves behind from [`outcome`]); [`events`] is what the run tells
//! whoever watches.

mod agent;
mod classify;
mod context;
mod cursor;
mod events;
mod inflight;
mod invoke;
mod outcome;
mod retry;
mod work;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

pub use context::TemplateError;
pub use events::{ChangeSummary, EventSink, RunEvent, RunReport, SCHEMA_VERSION, Silent};
pub use work::{StepWork, line_counts};

use crate::error::Exit;
use crate::fsm::{Ending, FireError, StateKind};
use crate::fsutil::write_replace;
use crate::project::{Project, Workflow};
use crate::shell::Redactor;
use crate::store::{NewRun, NewTransition, Run, RunStatus, Step, Store, StoreError};
use cursor::Cursor;
use invoke::{Ended, Turn};

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
    #[error(transparent)]
    Template(#[from] TemplateError),
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
            RunError::Replay(_) | RunError::Io { .. } | RunError::Runtime(_) => Exit::Internal,
            RunError::Internal(_) => Exit::Internal,
            RunError::Workspace(e) => crate::error::workspace_exit(e),
        }
    }

    pub fn help(&self) -> Option<String> {
        let help = match self {
            RunError::Store(e) => return crate::error::store_help(e).map(str::to_owned),
            RunError::NotResumable { help, .. } => help,
            RunError::Config(_) => "run `modix validate` and fix what it reports",
            RunError::Template(_) => "fix the template, then `modix resume <run>` continues",
            RunError::Replay(_) => "start a new run with `modix go`",
            RunError::Io { .. } | RunError::Runtime(_) => {
                "fix the cause, then `modix resume <run>` continues from the last recorded state"
            }
            RunError::Internal(_) => "this is a bug in modix; `modix resume <run>` may continue",
            // Its message says what to do.
            RunError::Workspace(_) => return None,
        };
        Some(help.to_owned())
    }

    pub fn code(&self) -> &'static str {
        match self {
            RunError::Store(_) => "store",
            RunError::NotResumable { .. } => "not_resumable",
            RunError::Config(_) => "config",
            RunError::Template(_) => "template",
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

    /// Runs a future to completion on the engine (e.g. doctor's probes).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }
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
}

/// Starts a new run of `epic` on `workflow` and drives it to a terminal
/// state (or an interrupt).
pub fn start(
    engine: &Engine,
    project: &Project,
    workflow: Workflow,
    epic: &str,
    opts: &RunOptions,
    sink: &mut dyn EventSink,
) -> Result<RunReport, RunError> {
    let machine = &workflow.machine;
    let mut store = open_store(project)?;
    // The workspace first: a run that cannot have one is never recorded.
    let id = Store::new_run_id();
    let (ws, notes) = work::create(project, &id, opts)?;
    let record = ws.record().clone();
    let created = store.create_run(&NewRun {
        epic: epic.to_owned(),
        workflow_id: machine.id().to_owned(),
        workflow_version: machine.version().to_string(),
        workflow_hash: machine.content_hash().to_owned(),
        initial_state: machine.state(machine.initial()).name.clone(),
        workdir: ws.workdir().display().to_string(),
        id: Some(id),
        workspace: serde_json::to_value(&record).ok(),
    });
    let run = match created {
        Ok(run) => run,
        Err(e) => {
            // Nothing refers to the workspace: take it away again.
            drop(ws);
            let _ = crate::workspace::prune(&crate::workspace::Git::new(), &record, true);
            return Err(e.into());
        }
    };
    store.claim_run(&run.id, std::process::id())?;
    let work = work::Work::new(ws, project)?;
    drive(
        engine,
        project,
        workflow,
        store,
        run,
        opts,
        sink,
        Opened {
            work,
            notes,
            resumed: false,
        },
    )
}

/// Continues an interrupted run from its last recorded state.
pub fn resume(
    engine: &Engine,
    project: &Project,
    run_ref: &str,
    opts: &RunOptions,
    sink: &mut dyn EventSink,
) -> Result<RunReport, RunError> {
    let mut store = open_store(project)?;
    let run = store.run(run_ref)?;
    let not_resumable =
        |message: String, help: &'static str| RunError::NotResumable { message, help };
    if run.status.is_terminal() {
        return Err(not_resumable(
            format!(
                "run {} already ended ({} in {}); nothing to resume",
                run.id, run.status, run.current_state
            ),
            "start a new run with `modix go \"<epic>\"`; `modix history <run>` shows how this one ended",
        ));
    }
    let workflow = match project.workflow(Some(&run.workflow_id)) {
        Ok(w) => w,
        Err(crate::error::Error::Config { diagnostics, .. }) => {
            return Err(RunError::Config(diagnostics));
        }
        Err(_) => {
            return Err(not_resumable(
                format!(
                    "run {} used workflow `{}`, which is no longer defined",
                    run.id, run.workflow_id
                ),
                "restore the workflow definition the run started with, or start a new run with `modix go`",
            ));
        }
    };
    let machine = &workflow.machine;
    if machine.content_hash() != run.workflow_hash {
        return Err(not_resumable(
            format!(
                "workflow `{}` changed since run {} started (recorded {} {}, now {} {}); resuming under different rules would make its history a lie",
                run.workflow_id,
                run.id,
                run.workflow_version,
                short(&run.workflow_hash),
                machine.version(),
                short(machine.content_hash())
            ),
            "start a new run with `modix go`, or restore the workflow definition the run started with",
        ));
    }
    store.claim_run(&run.id, std::process::id())?;
    let opened = recover(&mut store, project, &run, opts);
    let opened = match opened {
        Ok(o) => o,
        Err(e) => {
            let _ = store.release_run(&run.id, std::process::id());
            return Err(e);
        }
    };
    store.set_status(&run.id, RunStatus::Running, Some("resumed"))?;
    drive(engine, project, workflow, store, run, opts, sink, opened)
}

/// What a resume finds: the crashed agent stopped and recorded, and the
/// workspace opened again with what the abandoned step left discarded.
fn recover(
    store: &mut Store,
    project: &Project,
    run: &Run,
    opts: &RunOptions,
) -> Result<Opened, RunError> {
    recover_in_flight(store, project, &run.id)?;
    abandon_open_invocations(store, project, &run.id)?;
    let Some(record) = &run.workspace else {
        // A run from before workspaces were tracked: it goes on in a new one.
        let (ws, mut notes) = work::create(project, &run.id, opts)?;
        notes.push(
            "this run started before modix recorded workspaces; it continues in a new one".into(),
        );
        store.set_workspace(
            &run.id,
            &ws.workdir().display().to_string(),
            &serde_json::to_value(ws.record()).unwrap_or_default(),
        )?;
        let work = work::Work::new(ws, project)?;
        return Ok(Opened {
            work,
            notes,
            resumed: true,
        });
    };
    let abandoned = store.last_invocation_if_abandoned(&run.id)?;
    let (ws, mut notes, discarded) = work::reopen(record, opts.reset, abandoned.is_some())?;
    if let Some(d) = &discarded {
        notes.push(format!(
            "what the interrupted step left uncommitted ({}) was recorded under {} and removed",
            crate::text::plural(d.paths.len(), "file"),
            d.reference
        ));
        if let Some(n) = abandoned {
            let changes = serde_json::json!({ "discarded": d });
            store.set_invocation_changes(&run.id, n, &changes)?;
        }
    }
    let json = serde_json::to_value(ws.record()).unwrap_or_default();
    store.set_workspace(&run.id, &ws.workdir().display().to_string(), &json)?;
    let mut work = work::Work::new(ws, project)?;
    let past = store.invocation_changes(&run.id)?;
    work.replay(past.iter());
    Ok(Opened {
        work,
        notes,
        resumed: true,
    })
}

/// A run's workspace, ready for its next step.
struct Opened {
    work: work::Work,
    /// What the user should know about it.
    notes: Vec<String>,
    resumed: bool,
}

/// Closes the invocations a dead process left running, each recorded as
/// reaching its lifecycle's failure terminal.
fn abandon_open_invocations(
    store: &mut Store,
    project: &Project,
    run_id: &str,
) -> Result<(), RunError> {
    let lifecycles = &project.catalog;
    store.abandon_open_invocations(run_id, |fsm, last| {
        lifecycles
            .get(fsm)
            .and_then(|m| crate::fsm::Lifecycle::new(m.clone()).ok())
            .map(|l| l.abandoned_step(last))
    })?;
    Ok(())
}

/// The project's store, redacting the secrets of its config from every
/// text it writes.
fn open_store(project: &Project) -> Result<Store, RunError> {
    let store = Store::open(&project.config.paths.db())?;
    Ok(store.with_redactor(agent::redactor(&project.config)))
}

/// A crashed run's agent, if one was running: its process group stopped
/// (so it cannot write next to the re-run), and the invocation recorded as
/// abandoned — unless its step was committed after all.
fn recover_in_flight(store: &mut Store, project: &Project, run_id: &str) -> Result<(), RunError> {
    let dir = project.config.paths.run_dir(run_id);
    let path = inflight::InFlight::path(&dir);
    let Some(flight) = inflight::InFlight::read(&path) else {
        return Ok(());
    };
    if let Some(process) = flight.process {
        let grace =
            std::time::Duration::from_secs(project.config.runtimes.timeouts.kill_grace_secs);
        inflight::stop_orphan(process, grace);
    }
    if !store.has_transition(run_id, flight.seq)? {
        let lifecycle = project
            .catalog
            .get(&flight.lifecycle_fsm)
            .and_then(|m| crate::fsm::Lifecycle::new(m.clone()).ok());
        // The context the agent was given is in the run's context file.
        let context = std::fs::read(dir.join("context.json"))
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok())
            .unwrap_or(serde_json::Value::Null);
        if let Some(lifecycle) = lifecycle {
            store.record_abandoned(run_id, &flight.abandoned(context, &lifecycle))?;
        }
    }
    std::fs::remove_file(&path)
        .map_err(|e| RunError::io(format!("cannot remove {}", path.display()), e))
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

/// Everything fixed for the length of a run.
struct RunInfo<'p> {
    project: &'p Project,
    workflow: Workflow,
    run: Run,
    redactor: Redactor,
    workdir: PathBuf,
    files: RunFiles,
    stream: bool,
    /// Each shell's failure rules, compiled on first use.
    rules: std::cell::RefCell<std::collections::HashMap<String, Arc<classify::Rules>>>,
}

impl RunInfo<'_> {
    fn rules(&self, shell: &crate::config::Shell) -> Arc<classify::Rules> {
        let mut cache = self.rules.borrow_mut();
        let rules = cache
            .entry(shell.name.clone())
            .or_insert_with(|| Arc::new(classify::Rules::of(shell)));
        Arc::clone(rules)
    }
}

struct Driver<'p> {
    info: RunInfo<'p>,
    store: Store,
    /// The one source of where the run stands.
    cursor: Cursor,
    /// The run's workspace and the rules its steps are judged by.
    work: work::Work,
    /// The last commit the store's workspace record names.
    stored_commit: String,
    cancel: tokio::sync::watch::Receiver<bool>,
    sink: &'p mut dyn EventSink,
    started: Instant,
}

#[allow(clippy::too_many_arguments)] // start and resume hand over what they settled
fn drive(
    engine: &Engine,
    project: &Project,
    workflow: Workflow,
    mut store: Store,
    run: Run,
    opts: &RunOptions,
    sink: &mut dyn EventSink,
    opened: Opened,
) -> Result<RunReport, RunError> {
    sink.event(&RunEvent::RunStarted {
        run_id: run.id.clone(),
        workflow: workflow.machine.id().to_owned(),
        resumed: opened.resumed,
    });
    let ws = opened.work.workspace();
    sink.event(&RunEvent::Workspace {
        run_id: run.id.clone(),
        mode: ws.mode(),
        workdir: ws.workdir().to_path_buf(),
        branch: ws
            .record()
            .run_ref
            .strip_prefix("refs/heads/")
            .map(str::to_owned),
        base: ws.base_commit().to_owned(),
        notes: opened.notes,
    });
    let workdir = ws.workdir().to_path_buf();
    let stored_commit = ws.last_commit().to_owned();
    let prepared = prepare_run(&workflow, &store, &run, project);
    let (files, cursor) = match prepared {
        Ok(p) => p,
        Err(e) => return Err(give_up(&mut store, &run.id, e)),
    };
    let mut driver = Driver {
        info: RunInfo {
            project,
            redactor: agent::redactor(&project.config),
            workflow,
            run,
            workdir,
            files,
            stream: opts.stream,
            rules: Default::default(),
        },
        store,
        cursor,
        work: opened.work,
        stored_commit,
        cancel: engine.cancel.clone(),
        sink,
        started: Instant::now(),
    };
    match engine.runtime.block_on(driver.go()) {
        Ok(report) => {
            // The agents' private TMPDIR, empty by now.
            let _ = agent::remove_any(&driver.info.files.dir.join("tmp"));
            let pid = std::process::id();
            let _ = driver.store.release_run(&report.run_id, pid);
            driver.sink.event(&RunEvent::RunFinished(report.clone()));
            Ok(report)
        }
        Err(e) => Err(give_up(&mut driver.store, &driver.info.run.id, e)),
    }
}

/// Leaves the run resumable rather than stuck "running" under a dead owner.
fn give_up(store: &mut Store, run_id: &str, e: RunError) -> RunError {
    let _ = store.set_status(run_id, RunStatus::Interrupted, Some(&e.to_string()));
    let _ = store.release_run(run_id, std::process::id());
    e
}

/// The run's files, and where its record says it is.
fn prepare_run(
    workflow: &Workflow,
    store: &Store,
    run: &Run,
    project: &Project,
) -> Result<(RunFiles, Cursor), RunError> {
    let files = RunFiles::create(project, &run.id, workflow)?;
    let cursor = Cursor::replay(&workflow.machine, &store.transitions(&run.id)?)?;
    Ok((files, cursor))
}

impl Driver<'_> {
    async fn go(&mut self) -> Result<RunReport, RunError> {
        let machine = std::sync::Arc::clone(&self.info.workflow.machine);
        if self.cursor.transitions() == 0 {
            self.notify(machine.initial());
        }
        loop {
            if *self.cancel.borrow() {
                return self.interrupted("interrupted before the next step");
            }
            let id = self.cursor.state();
            let state = machine.state(id);
            let turn = match &state.kind {
                StateKind::Terminal { .. } => return Ok(self.report(None)),
                StateKind::Input { event } => {
                    invoke::input_turn(event, &state.name, &self.info.run.epic)
                }
                // Only so this compiles: the fsm-language branch adds gates;
                // running them (`modix approve`/`reject`) is the lead's.
                StateKind::Human { .. } => {
                    return Err(RunError::Internal(format!(
                        "state {} is a human gate, which this version cannot run yet",
                        state.name
                    )));
                }
                StateKind::Agent(spec) => {
                    let agent = self.info.workflow.agent(id).cloned().ok_or_else(|| {
                        RunError::Internal(format!("state {} has no resolved agent", state.name))
                    })?;
                    match self.agent_turn(id, spec, &agent).await? {
                        Ended::Turn(turn) => *turn,
                        Ended::Interrupted(invocation) => {
                            if let Some(invocation) = invocation {
                                self.store
                                    .record_abandoned(&self.info.run.id, &invocation)?;
                            }
                            self.info.files.forget_in_flight();
                            return self.interrupted(
                                "interrupted while an agent ran; resume repeats that invocation",
                            );
                        }
                    }
                }
            };
            self.commit(turn)?;
        }
    }

    /// Fires the turn's event and records the step in one transaction.
    fn commit(&mut self, turn: Turn) -> Result<(), RunError> {
        let machine = std::sync::Arc::clone(&self.info.workflow.machine);
        let fired = machine.fire(self.cursor.position(), &turn.event)?;
        let mut reason = turn.reason;
        if fired.redirected {
            reason = format!(
                "{reason}; `{}` already fired {} time(s), its bound — redirected to {}",
                fired.event,
                fired.max.unwrap_or(0),
                machine.state(fired.to).name
            );
        }
        let to = machine.state(fired.to);
        let status = status_in(&to.kind);
        // The workspace record moves with each recorded change; it is kept
        // in the step's transaction so the two never disagree.
        let last = self.work.workspace().last_commit();
        let workspace = (last != self.stored_commit).then(|| self.work.record_json());
        let record = self.store.record_step(
            &self.info.run.id,
            &Step {
                invocation: turn.invocation,
                messages: turn.messages,
                transition: NewTransition {
                    from: machine.state(fired.from).name.clone(),
                    event: fired.event.clone(),
                    to: to.name.clone(),
                    attempt: self.cursor.visits(fired.from),
                    bound: machine.bound_for_visits(fired.from).map(|b| b as u32),
                    agent: turn.agent,
                    reason: Some(reason),
                    redirected: fired.redirected,
                },
                run_status: status,
                workspace,
            },
        )?;
        self.stored_commit = self.work.workspace().last_commit().to_owned();
        self.cursor.advance(&fired);
        self.write_state_file(status);
        self.sink.event(&RunEvent::Transition(record));
        self.notify(fired.to);
        Ok(())
    }

    fn notify(&mut self, state: crate::fsm::StateId) {
        let state = self.info.workflow.machine.state(state);
        for name in &state.on_enter {
            tracing::info!("{}: {name}", state.name);
            self.sink.event(&RunEvent::Notification {
                run_id: self.info.run.id.clone(),
                state: state.name.clone(),
                name: name.clone(),
            });
        }
    }

    fn interrupted(&mut self, why: &str) -> Result<RunReport, RunError> {
        abandon_open_invocations(&mut self.store, self.info.project, &self.info.run.id)?;
        self.store
            .set_status(&self.info.run.id, RunStatus::Interrupted, Some(why))?;
        self.write_state_file(RunStatus::Interrupted);
        Ok(self.report(Some(why.to_owned())))
    }

    fn state_name(&self) -> &str {
        &self.info.workflow.machine.state(self.cursor.state()).name
    }

    fn report(&self, reason: Option<String>) -> RunReport {
        let machine = &self.info.workflow.machine;
        let status = match reason {
            Some(_) => RunStatus::Interrupted,
            None => status_in(&machine.state(self.cursor.state()).kind),
        };
        RunReport {
            run_id: self.info.run.id.clone(),
            workflow: machine.id().to_owned(),
            epic: self.info.run.epic.clone(),
            status,
            state: self.state_name().to_owned(),
            transitions: self.cursor.transitions(),
            duration_ms: self.started.elapsed().as_millis() as u64,
            reason,
            changes: self.change_summary(),
        }
    }

    /// The run's changes against its base (`None` if git cannot say).
    fn change_summary(&self) -> Option<ChangeSummary> {
        let ws = self.work.workspace();
        let rec = ws.record();
        // Nothing recorded since the base: no need to ask git.
        let changes = if rec.last_commit == rec.base_commit {
            Vec::new()
        } else {
            match crate::workspace::changes(ws.git(), rec) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("cannot summarise the run's changes: {e}");
                    return None;
                }
            }
        };
        let (added, removed) = line_counts(&changes);
        Some(ChangeSummary {
            mode: rec.mode,
            branch: rec.run_ref.strip_prefix("refs/heads/").map(str::to_owned),
            short_id: rec.short_id.clone(),
            workdir: rec.workdir.clone(),
            files: changes.len(),
            added,
            removed,
        })
    }

    /// `state.json`: a pointer for humans and scripts; SQLite stays the truth.
    fn write_state_file(&self, status: RunStatus) {
        let v = serde_json::json!({
            "run_id": self.info.run.id,
            "workflow": self.info.workflow.machine.id(),
            "state": self.state_name(),
            "status": status,
            "updated_at": jiff::Timestamp::now().to_string(),
        });
        let text = serde_json::to_string_pretty(&v).unwrap_or_default() + "\n";
        let path = self.info.project.config.paths.file("state.json");
        let spare = self.info.files.dir.join("state.json.spare");
        if let Err(e) = crate::fsutil::write_swap(&path, &spare, text.as_bytes()) {
            tracing::warn!("cannot update {}: {e}", path.display());
        }
    }
}

/// The run's status while it is in a state of this kind: the one place
/// that decides it.
fn status_in(kind: &StateKind) -> RunStatus {
    match kind {
        StateKind::Terminal {
            outcome: Ending::Success,
        } => RunStatus::Succeeded,
        StateKind::Terminal { .. } => RunStatus::Failed,
        _ => RunStatus::Running,
    }
}

/// The files of one run under `.modix/runs/<run>/`: the schemas its agents
/// answer to (written once, when the run starts) and the context package
/// the agent about to start reads.
struct RunFiles {
    /// `.modix/runs/<run>/`.
    dir: PathBuf,
}

impl RunFiles {
    fn create(project: &Project, run_id: &str, workflow: &Workflow) -> Result<Self, RunError> {
        let dir = project.config.paths.run_dir(run_id);
        let files = RunFiles { dir };
        let schemas = files.dir.join("schemas");
        std::fs::create_dir_all(&schemas)
            .map_err(|e| RunError::io(format!("cannot create {}", schemas.display()), e))?;
        let write = |path: PathBuf, text: &str| {
            write_replace(&path, text.as_bytes())
                .map_err(|e| RunError::io(format!("cannot write {}", path.display()), e))
        };
        for (_, state) in workflow.machine.states() {
            let Some(a) = state.agent() else { continue };
            let text = project
                .schemas
                .text(&a.output)
                .map_err(|e| RunError::Internal(e.to_string()))?;
            write(files.schema(&a.output), text)?;
            // The form strict structured-output APIs take (Codex's
            // --output-schema): every property required, optional ones nullable.
            if let Some(strict) = project.schemas.strict(&a.output) {
                let text = serde_json::to_string_pretty(&strict).unwrap_or_default() + "\n";
                write(files.strict_schema(&a.output), &text)?;
            }
        }
        Ok(files)
    }

    /// The in-flight note of an invocation now on record (best effort: a
    /// stale note is recognised by its seq anyway).
    fn forget_in_flight(&self) {
        let _ = std::fs::remove_file(inflight::InFlight::path(&self.dir));
    }

    fn schema(&self, id: &str) -> PathBuf {
        self.dir.join("schemas").join(format!("{id}.schema.json"))
    }

    fn strict_schema(&self, id: &str) -> PathBuf {
        self.dir
            .join("schemas")
            .join(format!("{id}.strict.schema.json"))
    }

    fn context(&self) -> PathBuf {
        self.dir.join("context.json")
    }

    /// One file per run, rewritten in place: only the agent about to start
    /// reads it, and each invocation's context is also kept in the store.
    fn write_context(&self, context: &serde_json::Value) -> Result<(), RunError> {
        let path = self.context();
        let text = serde_json::to_string_pretty(context).unwrap_or_default() + "\n";
        invoke::overwrite(&path, text.as_bytes())
            .map_err(|e| RunError::io(format!("cannot write {}", path.display()), e))
    }
}
