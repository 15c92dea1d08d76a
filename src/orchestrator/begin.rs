//! How a run is begun: a new run (`start`), one taken up again (`resume`,
//! after a crash, an interruption, a stop, a gate's answer or a redrive),
//! or a copy of one up to a step (`fork`) — each settled (store opened,
//! workspace made or reopened, orphans stopped) before it is driven.

use super::*;
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
    if crash_point().as_deref() == Some("record-run") {
        crash_for_tests();
    }
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
        overrides: opts.overrides.clone(),
    });
    let run = match created {
        Ok(run) => {
            crate::error::about_run(&run.id);
            run
        }
        Err(e) => {
            // Nothing refers to the workspace: take it away again.
            drop(ws);
            let _ = crate::workspace::prune(&crate::workspace::Git::new(), &record, true);
            return Err(e.into());
        }
    };
    store.claim_run(&run, std::process::id())?;
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
            forked_from: None,
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
    resume_run(engine, project, run_ref, opts, sink, None)
}

/// [`resume`], for a fork's first drive with where it branched off.
fn resume_run(
    engine: &Engine,
    project: &Project,
    run_ref: &str,
    opts: &RunOptions,
    sink: &mut dyn EventSink,
    forked_from: Option<super::events::ForkPoint>,
) -> Result<RunReport, RunError> {
    let mut store = open_store(project)?;
    let run = store.run(run_ref)?;
    crate::error::about_run(&run.id);
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
    // Stops asked of the run before this resume are done with; one asked
    // from here on (`modix stop` of a run this answer just took from its
    // gate) is for this drive, and taken at its first step boundary.
    let old: Vec<i64> = store
        .open_controls(&run.id)?
        .into_iter()
        .filter(|c| c.kind != crate::store::ControlKind::Pending)
        .map(|c| c.id)
        .collect();
    store.claim_run(&run, std::process::id())?;
    store.take_controls(&old)?;
    let opened = recover(&mut store, project, &run, opts);
    let opened = match opened {
        Ok(o) => Opened { forked_from, ..o },
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
        // `fork_run` copies the source's: the fork runs its agents.
        overrides: None,
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
    let from = super::events::ForkPoint {
        run_id: src.id.clone(),
        seq,
    };
    resume_run(engine, project, &id, opts, sink, Some(from))
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
            forked_from: None,
        });
    };
    let abandoned = store.last_invocation_if_abandoned(&run.id)?;
    let redactor = super::agent::redactor(&project.config);
    let left_file = project
        .config
        .paths
        .run_dir(&run.id)
        .join(super::files::LEFT_IN_PLACE);
    let left = std::fs::read_to_string(&left_file).ok();
    let (ws, mut notes, discarded) = work::reopen(
        record,
        opts.reset,
        abandoned.is_some(),
        left.as_deref().map(str::trim),
        &redactor,
    )?;
    // Used once: what it names is taken off now.
    let _ = std::fs::remove_file(&left_file);
    if let Some(d) = &discarded {
        let files = crate::text::plural(d.paths.len(), "file");
        notes.push(match &d.reference {
            Some(kept) => format!(
                "what the interrupted step left uncommitted ({files}) was recorded under {kept} and removed"
            ),
            None => format!("what the interrupted step left uncommitted ({files}) was removed"),
        });
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
        forked_from: None,
    })
}

/// A run's workspace, ready for its next step.
pub(super) struct Opened {
    pub(super) work: work::Work,
    /// What the user should know about it.
    pub(super) notes: Vec<String>,
    pub(super) resumed: bool,
    /// Set by a fork for its first drive (the terminal says so).
    pub(super) forked_from: Option<super::events::ForkPoint>,
}

/// Closes the invocations a dead process left running, each recorded as
/// reaching its lifecycle's failure terminal.
pub(super) fn abandon_open_invocations(
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

/// Stops whatever a run whose modix is gone left running: its agent's
/// process group (the in-flight record names it), then any process still
/// carrying the run's `MODIX_RUN_ID` — a daemon an agent started in a
/// session of its own is in no group of the run's. Only for a run no live
/// modix owns (its caller checked). Returns how many processes were
/// signalled.
pub fn stop_leftovers(
    paths: &crate::config::ProjectPaths,
    run_id: &str,
    grace: std::time::Duration,
) -> usize {
    let dir = paths.run_dir(run_id);
    let flight = inflight::InFlight::read(&inflight::InFlight::path(&dir));
    let group = flight
        .and_then(|f| f.process)
        .is_some_and(|p| inflight::stop_orphan(p, grace));
    let strays = crate::shell::stop_processes_with_env(&format!("MODIX_RUN_ID={run_id}"), grace);
    usize::from(group) + strays
}

/// A crashed run's agent, if one was running: its process group stopped
/// (so it cannot write next to the re-run), and the invocation recorded as
/// abandoned — unless its step was committed after all.
fn recover_in_flight(store: &mut Store, project: &Project, run_id: &str) -> Result<(), RunError> {
    let grace = std::time::Duration::from_secs(project.config.runtimes.timeouts.kill_grace_secs);
    stop_leftovers(&project.config.paths, run_id, grace);
    let dir = project.config.paths.run_dir(run_id);
    let path = inflight::InFlight::path(&dir);
    let Some(flight) = inflight::InFlight::read(&path) else {
        return Ok(());
    };
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

pub(super) fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}
