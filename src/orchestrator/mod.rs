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
mod budget;
mod classify;
mod context;
mod control;
mod cursor;
mod events;
mod inflight;
mod inputs;
mod invoke;
mod outcome;
pub mod preview;
mod retry;
mod work;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

pub use budget::{Ceiling, ceiling, usd};
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
    check_resumable(&run, opts)?;
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
    // What the command asks is checked before anything changes.
    if let Some(r) = &opts.redrive {
        redrive_target(machine, &store.transitions(&run.id)?, r)?;
    }
    if let Some(a) = &opts.answer {
        check_answer(machine, &run.current_state, a)?;
    }
    store.claim_run(&run.id, std::process::id())?;
    // Stops asked of the run before this resume are done with.
    let old: Vec<i64> = store
        .open_controls(&run.id)?
        .into_iter()
        .filter(|c| c.kind != crate::store::ControlKind::Pending)
        .map(|c| c.id)
        .collect();
    store.take_controls(&old)?;
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

/// Branches a new run off run `source` at its step `seq` and drives it on
/// from there: its record is the source's up to that step (linked to it),
/// its workspace starts at that step's commit (worktree runs), and `note`
/// reaches its next agents as a person's word.
#[allow(clippy::too_many_arguments)] // the command's answer, passed on as is
pub fn fork(
    engine: &Engine,
    project: &Project,
    source: &str,
    seq: u32,
    note: Option<&str>,
    by: &str,
    opts: &RunOptions,
    sink: &mut dyn EventSink,
) -> Result<RunReport, RunError> {
    let mut store = open_store(project)?;
    let src = store.run(source)?;
    let history = store.transitions(&src.id)?;
    let refuse = |message: String| RunError::NotResumable {
        message,
        help: "`modix history <run>` numbers its steps; fork at one that did not end the run",
    };
    let Some(step) = history.iter().find(|t| t.seq == seq) else {
        return Err(refuse(format!(
            "run {} has no step {seq} (it has {})",
            src.id,
            history.len()
        )));
    };
    let workflow = project.workflow(Some(&src.workflow_id)).map_err(|_| {
        refuse(format!(
            "run {} used workflow `{}`, which is no longer defined",
            src.id, src.workflow_id
        ))
    })?;
    let machine = &workflow.machine;
    if machine.content_hash() != src.workflow_hash {
        return Err(refuse(format!(
            "workflow `{}` changed since run {} started",
            src.workflow_id, src.id
        )));
    }
    if machine
        .state_id(&step.to)
        .is_none_or(|id| machine.state(id).is_terminal())
    {
        return Err(refuse(format!(
            "step {seq} ended run {} in {}",
            src.id, step.to
        )));
    }
    let id = Store::new_run_id();
    let (ws, notes) = fork_workspace(&store, project, &src, seq, &id, opts)?;
    let record = serde_json::to_value(ws.record()).unwrap_or_default();
    let new = NewRun {
        epic: src.epic.clone(),
        workflow_id: src.workflow_id.clone(),
        workflow_version: src.workflow_version.clone(),
        workflow_hash: src.workflow_hash.clone(),
        initial_state: step.to.clone(),
        workdir: ws.workdir().display().to_string(),
        id: Some(id.clone()),
        workspace: Some(record.clone()),
    };
    // The resume below takes the workspace's lock.
    drop(ws);
    let note = note.map(
        |n| serde_json::json!({ "event": "fork", "note": n, "by": by, "at": crate::store::now() }),
    );
    if let Err(e) = store.fork_run(&src.id, seq, &new, note) {
        if let Ok(r) = serde_json::from_value(record) {
            let _ = crate::workspace::prune(&crate::workspace::Git::new(), &r, true);
        }
        return Err(e.into());
    }
    for message in notes {
        sink.event(&RunEvent::Notice {
            run_id: id.clone(),
            message,
        });
    }
    resume(engine, project, &id, opts, sink)
}

/// The fork's workspace: for a worktree run, a new one at the commit the
/// source run had after step `seq`; otherwise a new one of the project as
/// it is (with a note saying so).
fn fork_workspace(
    store: &Store,
    project: &Project,
    src: &Run,
    seq: u32,
    id: &str,
    opts: &RunOptions,
) -> Result<(crate::workspace::Workspace, Vec<String>), RunError> {
    let record: Option<crate::workspace::WorkspaceRecord> = src
        .workspace
        .as_ref()
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let mut opts = opts.clone();
    let mut notes = Vec::new();
    match &record {
        Some(r) if r.mode == crate::workspace::Mode::Worktree => {
            opts.base = Some(commit_after(store, &src.id, seq, &r.base_commit)?);
        }
        Some(r) if r.mode == crate::workspace::Mode::InPlace => {
            return Err(RunError::NotResumable {
                message: format!("run {} worked in place: a fork needs a workspace of its own", src.id),
                help: "fork runs that work in a worktree (projects.json `workspace`)",
            });
        }
        _ => notes.push(format!(
            "the fork starts from the project's files as they are now, not as they were after step {seq}"
        )),
    }
    let (ws, more) = work::create(project, id, &opts)?;
    notes.extend(more);
    Ok((ws, notes))
}

/// The commit the run's branch had after step `seq`: the last accepted
/// step's commit up to it, else the run's base.
fn commit_after(store: &Store, run_id: &str, seq: u32, base: &str) -> Result<String, RunError> {
    let last_n = store
        .transitions(run_id)?
        .iter()
        .filter(|t| t.seq <= seq)
        .filter_map(|t| t.invocation)
        .max()
        .unwrap_or(0);
    let mut commit = base.to_owned();
    for n in 1..=last_n {
        let Ok(inv) = store.invocation(run_id, n) else {
            continue;
        };
        let Some(w) = inv
            .changes
            .and_then(|c| serde_json::from_value::<work::StepWork>(c).ok())
        else {
            continue;
        };
        if !w.empty && w.rejected.is_none() {
            commit = w.commit;
        }
    }
    Ok(commit)
}

/// Whether the gate the run waits at takes `a`'s event.
fn check_answer(machine: &crate::fsm::Machine, state: &str, a: &Answer) -> Result<(), RunError> {
    let events = machine
        .state_id(state)
        .and_then(|id| match &machine.state(id).kind {
            StateKind::Human { events, .. } => Some(events),
            _ => None,
        });
    match events {
        Some(events) if events.contains(&a.event) => Ok(()),
        Some(events) => Err(RunError::NotResumable {
            message: format!(
                "gate {state} takes {}; `{}` is not one of them",
                events.join(", "),
                a.event
            ),
            help: "`modix status <run>` shows the gate and its answers",
        }),
        None => Err(RunError::NotResumable {
            message: format!("the run waits in {state}, which is not a gate of its workflow"),
            help: "start a new run",
        }),
    }
}

/// Whether `run` can go on as `opts` asks: an ended run only by a redrive
/// of a failure, a gate's answer only at a gate.
fn check_resumable(run: &Run, opts: &RunOptions) -> Result<(), RunError> {
    let refuse = |message: String, help: &'static str| RunError::NotResumable { message, help };
    match (run.status, &opts.redrive, &opts.answer) {
        (RunStatus::Succeeded, Some(_), _) => Err(refuse(
            format!(
                "run {} succeeded (in {}); a success is not redriven",
                run.id, run.current_state
            ),
            "start a new run with `modix go`, or `modix fork <run> --at SEQ` to branch off a step",
        )),
        (RunStatus::Failed, Some(_), _) => Ok(()),
        (_, Some(_), _) => Err(refuse(
            format!(
                "run {} has not failed (it is {} in {}); only a failed run is redriven",
                run.id, run.status, run.current_state
            ),
            "`modix resume <run>` continues an interrupted or stopped run",
        )),
        (status, None, _) if status.is_terminal() => Err(refuse(
            format!(
                "run {} already ended ({} in {}); nothing to resume",
                run.id, run.status, run.current_state
            ),
            "a failed run goes on with `modix resume <run> --from STATE --note TEXT`; `modix history <run>` shows how it ended",
        )),
        (status, None, Some(_)) if status != RunStatus::Waiting => Err(refuse(
            format!(
                "run {} is not waiting at a gate (it is {} in {})",
                run.id, run.status, run.current_state
            ),
            "`modix status <run>` shows where it is",
        )),
        _ => Ok(()),
    }
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
    // What no progress remembers starts afresh at the last redrive, like
    // the loop counters: the invocations after it.
    let history = store.transitions(&run.id)?;
    let after = history
        .iter()
        .rposition(|t| t.event == crate::fsm::REDRIVE)
        .map_or(0, |i| {
            history[i..]
                .iter()
                .filter_map(|t| t.invocation)
                .min()
                .unwrap_or(u32::MAX)
        });
    let past = store.invocation_changes(&run.id)?;
    work.replay(past.iter().filter(|(n, _)| *n >= after).map(|(_, c)| c));
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
    /// The run's latest outputs and latest step, read incrementally.
    tail: crate::store::RunTail,
    /// Stops asked by other processes (`modix stop`).
    controls: control::Controls,
    /// The task watching for them (ended when the drive ends).
    watcher: tokio::task::JoinHandle<()>,
    /// Handed in by the command: the gate's answer, the redrive.
    answer: Option<Answer>,
    redrive: Option<Redrive>,
    cancel: tokio::sync::watch::Receiver<bool>,
    sink: &'p mut dyn EventSink,
    started: Instant,
    /// Test instrumentation (`MODIX_CRASH_BEFORE_COMMIT`): the drive's step
    /// at whose commit this process kills itself.
    crash_before: Option<u32>,
    /// Steps this drive has committed.
    committed: u32,
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
    let (controls, cancel, watcher) = {
        let _in_runtime = engine.runtime.enter();
        control::watch(
            project.config.paths.db(),
            run.id.clone(),
            engine.cancel.clone(),
        )
    };
    if opts.stop_after_answer {
        controls.ask(control::StopAsked::AtBoundary {
            by: "the answer's --later".into(),
        });
    }
    let prepared = prepare_run(&workflow, &store, &run, project);
    let (files, cursor, tail) = match prepared {
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
        tail,
        work: opened.work,
        stored_commit,
        controls,
        watcher,
        answer: opts.answer.clone(),
        redrive: opts.redrive.clone(),
        cancel,
        sink,
        started: Instant::now(),
        crash_before: std::env::var("MODIX_CRASH_BEFORE_COMMIT")
            .ok()
            .and_then(|v| v.parse().ok()),
        committed: 0,
    };
    let result = engine.runtime.block_on(driver.go());
    driver.watcher.abort();
    match result {
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

/// Dies as `kill -9` would kill it, between a step's agent ending (its work
/// settled) and the step's commit: the window tests of the record's crash
/// guarantees cannot hit reliably from outside.
fn crash_for_tests() -> ! {
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    unreachable!("SIGKILL cannot be caught")
}

/// The run's files, where its record says it is, and its latest steps.
fn prepare_run(
    workflow: &Workflow,
    store: &Store,
    run: &Run,
    project: &Project,
) -> Result<(RunFiles, Cursor, crate::store::RunTail), RunError> {
    let files = RunFiles::create(project, &run.id, workflow)?;
    let cursor = Cursor::replay(&workflow.machine, &store.transitions(&run.id)?)?;
    let tail = store.run_tail(&run.id, cursor.transitions())?;
    Ok((files, cursor, tail))
}

impl Driver<'_> {
    async fn go(&mut self) -> Result<RunReport, RunError> {
        let machine = std::sync::Arc::clone(&self.info.workflow.machine);
        if self.cursor.transitions() == 0 {
            self.notify(machine.initial());
        }
        if let Some(r) = self.redrive.take() {
            self.commit_redrive(&r)?;
        }
        loop {
            // A gate's answer is recorded before any stop is taken.
            if let Some(stop) = self.controls.stop_asked().filter(|_| self.answer.is_none()) {
                return self.stopped(&stop);
            }
            if *self.cancel.borrow() {
                return self.interrupted("interrupted before the next step");
            }
            let id = self.cursor.state();
            let state = machine.state(id);
            let turn = match &state.kind {
                StateKind::Terminal { .. } => {
                    let status = status_in(&state.kind);
                    return Ok(self.report(status, None));
                }
                StateKind::Input { event } => {
                    invoke::input_turn(event, &state.name, &self.info.run.epic)
                }
                StateKind::Human { question, events } => match self.answer.take() {
                    Some(a) if events.contains(&a.event) => invoke::human_turn(&a, &state.name),
                    Some(a) => {
                        return Err(RunError::NotResumable {
                            message: format!(
                                "gate {} takes {}; `{}` is not one of them",
                                state.name,
                                events.join(", "),
                                a.event
                            ),
                            help: "`modix status <run>` shows the gate and its answers",
                        });
                    }
                    None => return self.waiting(question),
                },
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
                            if let Some(stop) = self.controls.stop_asked() {
                                return self.stopped(&stop);
                            }
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
        self.committed += 1;
        if self.crash_before == Some(self.committed) {
            crash_for_tests();
        }
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
                delivered: turn.delivered,
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
        self.pause(RunStatus::Interrupted, why)
    }

    /// Stopped as asked (`modix stop`): resumable, like an interruption.
    fn stopped(&mut self, stop: &control::StopAsked) -> Result<RunReport, RunError> {
        let why = match stop {
            control::StopAsked::AtBoundary { by } => {
                format!("stopped at a step boundary, as {by} asked (`modix stop`)")
            }
            control::StopAsked::Now { by } => format!(
                "stopped now, as {by} asked (`modix stop --now`); resume repeats the agent's invocation"
            ),
        };
        self.pause(RunStatus::Stopped, &why)
    }

    /// At a human gate: the run waits, with nobody driving it, for
    /// `modix approve`/`reject`/`answer`.
    fn waiting(&mut self, question: &str) -> Result<RunReport, RunError> {
        self.store
            .set_status(&self.info.run.id, RunStatus::Waiting, Some(question))?;
        self.write_state_file(RunStatus::Waiting);
        Ok(self.report(RunStatus::Waiting, Some(question.to_owned())))
    }

    /// Leaves the run resumable in `status`, for `why`.
    fn pause(&mut self, status: RunStatus, why: &str) -> Result<RunReport, RunError> {
        abandon_open_invocations(&mut self.store, self.info.project, &self.info.run.id)?;
        self.store
            .set_status(&self.info.run.id, status, Some(why))?;
        self.write_state_file(status);
        Ok(self.report(status, Some(why.to_owned())))
    }

    /// Takes a run that ended in a failure terminal back to a state it
    /// visited, recorded as a `redrive` transition with the person's note.
    fn commit_redrive(&mut self, r: &Redrive) -> Result<(), RunError> {
        let machine = std::sync::Arc::clone(&self.info.workflow.machine);
        let from = self.cursor.state();
        let to = redrive_target(&machine, &self.store.transitions(&self.info.run.id)?, r)?;
        let note = r
            .note
            .as_deref()
            .map(|n| format!(": {n}"))
            .unwrap_or_default();
        let target = machine.state(to);
        let record = self.store.record_step(
            &self.info.run.id,
            &Step {
                invocation: None,
                messages: invoke::note_message(
                    &target.name,
                    crate::fsm::REDRIVE,
                    r.note.as_deref(),
                    &r.by,
                ),
                transition: NewTransition {
                    from: machine.state(from).name.clone(),
                    event: crate::fsm::REDRIVE.to_owned(),
                    to: target.name.clone(),
                    attempt: 1,
                    bound: None,
                    agent: None,
                    reason: Some(format!("redriven by {}{note}", r.by)),
                    redirected: false,
                },
                run_status: status_in(&target.kind),
                workspace: None,
                delivered: Vec::new(),
            },
        )?;
        self.cursor
            .redrive(&machine, to)
            .ok_or_else(|| RunError::Internal("the machine refused a checked redrive".into()))?;
        self.work.forget_progress();
        self.write_state_file(status_in(&target.kind));
        self.sink.event(&RunEvent::Transition(record));
        self.notify(to);
        Ok(())
    }

    fn state_name(&self) -> &str {
        &self.info.workflow.machine.state(self.cursor.state()).name
    }

    fn report(&self, status: RunStatus, reason: Option<String>) -> RunReport {
        let machine = &self.info.workflow.machine;
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
            usage: budget::reported(&self.store, &self.info.run.id),
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

/// The state a redrive continues from: the one asked for, which must be a
/// state the run visited and not a terminal; by default the state whose
/// failure ended the run (the last transition's source).
fn redrive_target(
    machine: &crate::fsm::Machine,
    history: &[crate::store::TransitionRecord],
    r: &Redrive,
) -> Result<crate::fsm::StateId, RunError> {
    let refuse = |message: String| RunError::NotResumable {
        message,
        help: "name a state the run visited with `--from STATE` (`modix history <run>` lists them)",
    };
    let name = match &r.from {
        Some(name) => name.clone(),
        None => history
            .last()
            .map(|t| t.from.clone())
            .ok_or_else(|| refuse("the run has no recorded step to redrive from".into()))?,
    };
    let id = machine
        .state_id(&name)
        .ok_or_else(|| refuse(format!("the workflow has no state `{name}`")))?;
    if machine.state(id).is_terminal() {
        return Err(refuse(format!(
            "{name} is a final state; redrive to a state that works"
        )));
    }
    if !history.iter().any(|t| t.to == name || t.from == name) {
        return Err(refuse(format!("the run never visited {name}")));
    }
    Ok(id)
}

/// The run's status while it is in a state of this kind: the one place
/// that decides it.
fn status_in(kind: &StateKind) -> RunStatus {
    match kind {
        StateKind::Terminal {
            outcome: Ending::Success,
        } => RunStatus::Succeeded,
        StateKind::Terminal { .. } => RunStatus::Failed,
        StateKind::Human { .. } => RunStatus::Waiting,
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
