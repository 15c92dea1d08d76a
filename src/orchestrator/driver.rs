//! Driving a run: the loop that takes each state's turn (an agent's, a
//! gate's, an input's), fires the event, and commits the step in one
//! transaction before the next — and how a drive ends (done, waiting at a
//! gate, stopped, interrupted, given up).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use super::*;

/// Everything fixed for the length of a run.
pub(super) struct RunInfo<'p> {
    pub(super) project: &'p Project,
    pub(super) workflow: Workflow,
    pub(super) run: Run,
    /// The values packages quote from the record, as their text writes
    /// them, with the run's redactor ([`RunInfo::redactor`]).
    pub(super) texts: super::context::StoredTexts,
    pub(super) workdir: PathBuf,
    pub(super) files: RunFiles,
    pub(super) stream: bool,
    /// Each shell's failure rules, compiled on first use.
    pub(super) rules: std::cell::RefCell<std::collections::HashMap<String, Arc<classify::Rules>>>,
    /// Where the agents' programs were found, on first use.
    pub(super) programs: super::agent::Programs,
    /// The run's tmp folder as last listed empty (`agent::private_tmp`).
    pub(super) tmp_seen: super::agent::TmpSeen,
    /// What agents inherit of modix's environment (`agent::inherited`).
    pub(super) inherited: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

impl RunInfo<'_> {
    /// What every text the run shows or stores is redacted with.
    pub(super) fn redactor(&self) -> &Redactor {
        self.texts.redactor()
    }

    pub(super) fn rules(&self, shell: &crate::config::Shell) -> Arc<classify::Rules> {
        let mut cache = self.rules.borrow_mut();
        let rules = cache
            .entry(shell.name.clone())
            .or_insert_with(|| Arc::new(classify::Rules::of(shell)));
        Arc::clone(rules)
    }
}

pub(super) struct Driver<'p> {
    pub(super) info: RunInfo<'p>,
    pub(super) store: Store,
    /// The one source of where the run stands.
    pub(super) cursor: Cursor,
    /// The run's workspace and the rules its steps are judged by.
    pub(super) work: work::Work,
    /// The last commit the store's workspace record names.
    pub(super) stored_commit: String,
    /// The run's latest outputs and latest step, read incrementally.
    pub(super) tail: crate::store::RunTail,
    /// Stops asked by other processes (`modix stop`).
    pub(super) controls: control::Controls,
    /// The task watching for them (ended when the drive ends).
    pub(super) watcher: tokio::task::JoinHandle<()>,
    /// Handed in by the command: the gate's answer, the redrive.
    pub(super) answer: Option<Answer>,
    pub(super) redrive: Option<Redrive>,
    pub(super) cancel: tokio::sync::watch::Receiver<bool>,
    pub(super) sink: &'p mut dyn EventSink,
    pub(super) started: Instant,
    /// Test instrumentation (`MODIX_CRASH_AT=commit:N`): the drive's step
    /// at whose commit this process kills itself.
    pub(super) crash_before: Option<u32>,
    /// Steps this drive has committed.
    pub(super) committed: u32,
    /// What this drive last wrote to `state.json`: the state and status.
    pub(super) state_file: Option<(String, RunStatus)>,
    /// The last transition this drive recorded (what the next step nearly
    /// always asks for: the one that brought the run where it is).
    pub(super) last_transition: Option<crate::store::TransitionRecord>,
    /// The last step, committed and on its way to the disk, with what it
    /// tells the world once there (see [`Driver::announce`]).
    pub(super) unannounced: Option<Unannounced>,
    /// What the last step no longer needs, freed while the next agent runs
    /// rather than between its commit and that agent's start.
    pub(super) leftovers: Leftovers,
}

/// Values to free off a step's path (see [`Driver::leftovers`]): a step's
/// record, inputs and materials are thousands of small allocations.
#[derive(Default)]
pub(super) struct Leftovers(Vec<Box<dyn std::any::Any>>);

impl Leftovers {
    pub(super) fn keep(&mut self, value: impl std::any::Any) {
        self.0.push(Box::new(value));
    }
}

/// What a committed step tells the world, once the disk has it.
pub(super) struct Unannounced {
    landing: crate::store::Landing,
    record: crate::store::TransitionRecord,
    status: RunStatus,
    to: crate::fsm::StateId,
}

impl Unannounced {
    /// Waits until the step is on disk, then says it. Takes the drive's
    /// parts it needs, not the drive: an agent's turn says it while its
    /// call borrows the run's facts.
    pub(super) fn say(
        self,
        info: &RunInfo,
        state_file: &mut Option<(String, RunStatus)>,
        sink: &mut dyn EventSink,
    ) -> Result<(), RunError> {
        self.landing.wait()?;
        let state = &info.workflow.machine.state(self.to).name;
        write_state_file(info, state, self.status, state_file);
        sink.event(&RunEvent::Transition(self.record));
        notify(info, sink, self.to);
        Ok(())
    }
}

/// What an agent's turn says before its first attempt's agent runs: the
/// last step, once on disk (if one is unannounced), then the agent's start.
/// With `durability: full` it is said before the agent starts; with
/// `pipelined`, once it has started (the step's sync then runs beside the
/// agent's start), and the attempt stops that agent if the sync fails.
pub(super) struct Herald<'a> {
    pub(super) step: Option<Unannounced>,
    pub(super) started: RunEvent,
    pub(super) state_file: &'a mut Option<(String, RunStatus)>,
    pub(super) sink: &'a mut dyn EventSink,
}

impl<'a> Herald<'a> {
    /// What is still `unsaid` (taken: it is said once), lent the drive's
    /// `state.json` and sink for one call.
    pub(super) fn lend(
        unsaid: &mut Option<(Option<Unannounced>, RunEvent)>,
        state_file: &'a mut Option<(String, RunStatus)>,
        sink: &'a mut dyn EventSink,
    ) -> Option<Self> {
        let (step, started) = unsaid.take()?;
        Some(Herald {
            step,
            started,
            state_file,
            sink,
        })
    }

    pub(super) fn say(self, info: &RunInfo) -> Result<(), RunError> {
        if let Some(step) = self.step {
            step.say(info, self.state_file, self.sink)?;
        }
        self.sink.event(&self.started);
        Ok(())
    }
}

/// Events for the notifications `state` declares on entry.
fn notify(info: &RunInfo, sink: &mut dyn EventSink, state: crate::fsm::StateId) {
    let state = info.workflow.machine.state(state);
    for name in &state.on_enter {
        tracing::info!("{}: {name}", state.name);
        sink.event(&RunEvent::Notification {
            run_id: info.run.id.clone(),
            state: state.name.clone(),
            name: name.clone(),
        });
    }
}

#[allow(clippy::too_many_arguments)] // start and resume hand over what they settled
pub(super) fn drive(
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
        forked_from: opened.forked_from.clone(),
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
            texts: super::context::StoredTexts::new(agent::redactor(&project.config)),
            workflow,
            run,
            workdir,
            files,
            stream: opts.stream,
            rules: Default::default(),
            programs: Default::default(),
            tmp_seen: Default::default(),
            inherited: agent::inherited(&project.config.runtimes),
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
        crash_before: crash_point().and_then(|p| p.strip_prefix("commit:")?.parse().ok()),
        committed: 0,
        state_file: None,
        last_transition: None,
        unannounced: None,
        leftovers: Leftovers::default(),
    };
    let result = engine.runtime.block_on(driver.go());
    // However the drive ended, its last step is said once it is on disk.
    let result = match (result, driver.announce()) {
        // A record nobody can read again is never reported as made.
        (Ok(report), Ok(())) => driver
            .store
            .still_here()
            .map(|()| report)
            .map_err(Into::into),
        (Ok(_), Err(e)) | (Err(e), _) => Err(e),
    };
    driver.watcher.abort();
    // The agents' private TMPDIR, with what the last agent left in it: each
    // agent's leftovers go as the next one is prepared, the last one's here.
    let _ = agent::remove_any(&driver.info.files.dir.join("tmp"));
    match result {
        Ok(report) => {
            let pid = std::process::id();
            let _ = driver.store.release_run(&report.run_id, pid);
            if let Some(message) = undelivered(&driver.store, &report) {
                driver.sink.event(&RunEvent::Notice {
                    run_id: report.run_id.clone(),
                    message,
                });
            }
            driver.sink.event(&RunEvent::RunFinished(report.clone()));
            Ok(report)
        }
        Err(e) => Err(give_up(&mut driver.store, &driver.info.run.id, e)),
    }
}

/// What a person queued for the run (`modix pending add`) that no agent
/// got because the run ended first: said, not dropped silently. They stay
/// queued: a redriven run (`resume --from`) hands them on.
fn undelivered(store: &Store, report: &RunReport) -> Option<String> {
    if !matches!(report.status, RunStatus::Succeeded | RunStatus::Failed) {
        return None;
    }
    let left = store
        .controls(&report.run_id, crate::store::ControlKind::Pending)
        .ok()?
        .into_iter()
        .filter(|c| c.taken_at.is_none())
        .count();
    (left > 0).then(|| {
        format!(
            "{} never reached an agent: the run ended first (`modix pending list {}` shows {})",
            crate::text::plural(left, "pending message"),
            report.run_id,
            if left == 1 { "it" } else { "them" }
        )
    })
}

/// Leaves the run resumable rather than stuck "running" under a dead owner.
pub(super) fn give_up(store: &mut Store, run_id: &str, e: RunError) -> RunError {
    // The run is recorded: a template that failed stopped a run, it did not
    // keep one from starting.
    let e = match e {
        RunError::Template(t) => RunError::TemplateInRun(t),
        e => e,
    };
    let _ = store.set_status(run_id, RunStatus::Interrupted, Some(&e.to_string()));
    let _ = store.release_run(run_id, std::process::id());
    e
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
    pub(super) async fn go(&mut self) -> Result<RunReport, RunError> {
        let machine = std::sync::Arc::clone(&self.info.workflow.machine);
        if self.cursor.transitions() == 0 {
            self.notify(machine.initial());
        }
        if let Some(r) = self.redrive.take() {
            self.commit_redrive(&r)?;
        }
        loop {
            // An agent's turn says the last step just before its agent
            // starts, having prepared its prompt while the step's commit
            // went to disk; any other state has nothing to prepare.
            if !matches!(machine.state(self.cursor.state()).kind, StateKind::Agent(_)) {
                self.announce()?;
                // No agent to free them beside.
                self.leftovers = Leftovers::default();
            }
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
                    return Ok(self.report(status, self.failed_because(status)));
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
                            self.work
                                .note_left_in_place(&self.info.files.left_in_place());
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
    pub(super) fn commit(&mut self, turn: Turn) -> Result<(), RunError> {
        self.announce()?;
        let machine = std::sync::Arc::clone(&self.info.workflow.machine);
        let fired = machine.fire(self.cursor.position(), &turn.event)?;
        let mut reason = turn.reason;
        if fired.redirected {
            reason = format!(
                "{reason}; `{}` already fired {}, its bound — redirected to {}",
                fired.event,
                match fired.max.unwrap_or(0) {
                    1 => "once".to_owned(),
                    n => format!("{n} times"),
                },
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
            super::crash_for_tests();
        }
        let step = Step {
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
        };
        let (record, mut landing) = self.store.record_step_tailed(&mut self.tail, &step)?;
        if self.info.project.config.runtimes.durability == crate::config::Durability::Full {
            landing.begin();
        }
        self.leftovers.keep(step);
        self.stored_commit = self.work.workspace().last_commit().to_owned();
        self.last_transition = Some(record.clone());
        self.cursor.advance(&fired);
        self.unannounced = Some(Unannounced {
            landing,
            record,
            status,
            to: fired.to,
        });
        Ok(())
    }

    /// Waits until the last step is on disk, then tells the world: its
    /// transition event, `state.json`, the new state's notifications. Before
    /// anything that depends on the step: the next agent, any other event,
    /// a pause, the end of the drive.
    pub(super) fn announce(&mut self) -> Result<(), RunError> {
        match self.unannounced.take() {
            Some(u) => u.say(&self.info, &mut self.state_file, &mut *self.sink),
            None => Ok(()),
        }
    }

    pub(super) fn notify(&mut self, state: crate::fsm::StateId) {
        notify(&self.info, &mut *self.sink, state);
    }

    pub(super) fn interrupted(&mut self, why: &str) -> Result<RunReport, RunError> {
        self.pause(RunStatus::Interrupted, why)
    }

    /// Stopped as asked (`modix stop`): resumable, like an interruption.
    pub(super) fn stopped(&mut self, stop: &control::StopAsked) -> Result<RunReport, RunError> {
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
    pub(super) fn waiting(&mut self, question: &str) -> Result<RunReport, RunError> {
        self.announce()?;
        self.store
            .set_status(&self.info.run.id, RunStatus::Waiting, Some(question))?;
        self.write_state_file(RunStatus::Waiting);
        Ok(self.report(RunStatus::Waiting, Some(question.to_owned())))
    }

    /// Leaves the run resumable in `status`, for `why`.
    pub(super) fn pause(&mut self, status: RunStatus, why: &str) -> Result<RunReport, RunError> {
        self.announce()?;
        abandon_open_invocations(&mut self.store, self.info.project, &self.info.run.id)?;
        self.store
            .set_status(&self.info.run.id, status, Some(why))?;
        self.write_state_file(status);
        Ok(self.report(status, Some(why.to_owned())))
    }

    /// Takes a run that ended in a failure terminal back to a state it
    /// visited, recorded as a `redrive` transition with the person's note.
    pub(super) fn commit_redrive(&mut self, r: &Redrive) -> Result<(), RunError> {
        let machine = std::sync::Arc::clone(&self.info.workflow.machine);
        let from = self.cursor.state();
        let to = redrive_target(&machine, &self.store.transitions(&self.info.run.id)?, r)?;
        let note = r
            .note
            .as_deref()
            .map(|n| format!(": {n}"))
            .unwrap_or_default();
        let target = machine.state(to);
        // Through the tail too: a tail taken as current by the last step
        // must not skip this step's note at its next refresh.
        self.announce()?;
        let (record, landing) = self.store.record_step_tailed(
            &mut self.tail,
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
        landing.wait()?;
        self.cursor
            .redrive(&machine, to)
            .ok_or_else(|| RunError::Internal("the machine refused a checked redrive".into()))?;
        self.work.forget_progress();
        self.write_state_file(status_in(&target.kind));
        self.sink.event(&RunEvent::Transition(record));
        self.notify(to);
        Ok(())
    }

    pub(super) fn state_name(&self) -> &str {
        &self.info.workflow.machine.state(self.cursor.state()).name
    }

    /// Why a run that ended in failure got there: the reason of the step
    /// that took it there (an agent's failure class and its CLI's own
    /// words), so the last word of `go` names it, even with `-q`.
    fn failed_because(&self, status: RunStatus) -> Option<String> {
        let t = self
            .last_transition
            .as_ref()
            .filter(|_| status == RunStatus::Failed)?;
        let reason = t.reason.as_deref().filter(|r| !r.is_empty())?;
        Some(format!("{}: {reason}", t.from))
    }

    pub(super) fn report(&self, status: RunStatus, reason: Option<String>) -> RunReport {
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
    pub(super) fn change_summary(&self) -> Option<ChangeSummary> {
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

    pub(super) fn write_state_file(&mut self, status: RunStatus) {
        let state = self.state_name().to_owned();
        write_state_file(&self.info, &state, status, &mut self.state_file);
    }
}

/// The state a redrive continues from: the one asked for, which must be a
/// state the run visited and not a terminal; by default the state whose
/// failure ended the run (the last transition's source).
pub(super) fn redrive_target(
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
pub(super) fn status_in(kind: &StateKind) -> RunStatus {
    match kind {
        StateKind::Terminal {
            outcome: Ending::Success,
        } => RunStatus::Succeeded,
        StateKind::Terminal { .. } => RunStatus::Failed,
        StateKind::Human { .. } => RunStatus::Waiting,
        _ => RunStatus::Running,
    }
}

/// `state.json`: a pointer for humans and scripts; SQLite stays the truth.
/// Written when what it says changes (a loop that stays in its state
/// rewrites nothing), its `updated_at` saying since when; `last` is what
/// this drive last wrote.
fn write_state_file(
    info: &RunInfo,
    state: &str,
    status: RunStatus,
    last: &mut Option<(String, RunStatus)>,
) {
    if last
        .as_ref()
        .is_some_and(|(s, st)| s == state && *st == status)
    {
        return;
    }
    let v = serde_json::json!({
        "run_id": info.run.id,
        "workflow": info.workflow.machine.id(),
        "state": state,
        "status": status,
        "updated_at": jiff::Timestamp::now().to_string(),
    });
    let text = serde_json::to_string_pretty(&v).unwrap_or_default() + "\n";
    let path = info.project.config.paths.file("state.json");
    let spare = info.files.dir.join("state.json.spare");
    match crate::fsutil::write_swap(&path, &spare, text.as_bytes()) {
        Ok(()) => *last = Some((state.to_owned(), status)),
        Err(e) => tracing::warn!("cannot update {}: {e}", path.display()),
    }
}
