//! One agent state's turn, in four steps: gather the inputs earlier steps
//! left ([`Inputs`]), make the invocation's facts ([`Call`]) and from them
//! its context package and prompt, run the agent (prepare, spawn, judge),
//! and turn the verdict into a [`Turn`] that the driver commits as is.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::agent::{self, Failure, Verdict};
use super::classify::Rules;
use super::context::{ContextPackage, default_prompt, render_prompt};
use super::events::RunEvent;
use super::inflight::InFlight;
use super::work::{NO_PROGRESS, StepFacts, StepWork};
use super::{Driver, RunError, outcome, retry};
use crate::config::{Agent, Binding, ContextMode};
use crate::fsm::{AgentState, Ending, FailureClass, StateId, StateKind};
use crate::shell::{EchoFn, ProcessOutcome, process_start_ticks};
use crate::store::{InvocationStatus, NewInvocation, NewMessage, ProcessIds};

/// The facts of one invocation, gathered once: its context package, its
/// process's argv and environment, and its record are all made from these.
pub(super) struct Call<'a> {
    pub epic: &'a str,
    pub run_id: &'a str,
    pub workflow: &'a str,
    pub state: &'a str,
    pub agent: &'a Agent,
    /// The output schema id.
    pub output: &'a str,
    pub attempt: u32,
    pub bound: Option<u64>,
    pub workdir: &'a Path,
    pub context_path: PathBuf,
    pub schema_path: PathBuf,
    /// The same schema in strict form (see `schema::strict`).
    pub strict_schema_path: PathBuf,
    /// The project's output schemas: what the answer is validated with.
    pub schemas: &'a crate::schema::Schemas,
    /// Where the prompt goes for a shell that reads it from a file.
    pub prompt_path: PathBuf,
    /// The invocation's own temporary folder (its `TMPDIR`).
    pub tmp_dir: PathBuf,
    pub timeout: Duration,
    pub echo: Option<EchoFn>,
    /// The shell's failure rules (none for a plain command).
    pub rules: Option<Arc<Rules>>,
}

/// What earlier steps left for this one, read from the store.
pub(super) struct Inputs {
    pub task_spec: Option<Value>,
    pub previous_result: Option<Value>,
    pub feedback: Option<String>,
    pub context_mode: ContextMode,
    pub history: Option<Vec<Value>>,
}

/// What one state's turn came to, ready to commit: the event it raises and
/// what the step records with it.
pub(super) struct Turn {
    pub event: String,
    pub invocation: Option<NewInvocation>,
    pub messages: Vec<NewMessage>,
    pub reason: String,
    pub agent: Option<String>,
}

/// What running the agent came to.
struct Ran {
    verdict: Verdict,
    out: Option<ProcessOutcome>,
    process: Option<ProcessIds>,
    /// Why it could not be started, when it could not.
    error: Option<String>,
}

impl Ran {
    fn failed_to_start(class: FailureClass, why: String) -> Ran {
        Ran {
            verdict: Verdict::Failed(Failure::new(class, why.clone())),
            out: None,
            process: None,
            error: Some(why),
        }
    }
}

/// The class of a process that could not be started (transient OS
/// refusals were already retried).
fn spawn_class(e: &crate::shell::SpawnError) -> FailureClass {
    use crate::shell::SpawnError;
    match e {
        SpawnError::NotFound { .. }
        | SpawnError::InterpreterNotFound { .. }
        | SpawnError::PermissionDenied { .. } => FailureClass::NotFound,
        SpawnError::BadCwd { .. } | SpawnError::Io { .. } => FailureClass::AgentError,
    }
}

/// How an agent state's turn ended.
pub(super) enum Ended {
    /// With a verdict, ready to commit.
    Turn(Box<Turn>),
    /// Stopped by Ctrl-C or SIGTERM while the agent ran: the invocation is
    /// recorded as abandoned, and a resume runs it again.
    Interrupted(Box<NewInvocation>),
}

impl Driver<'_> {
    /// Runs the agent of an agent state.
    pub(super) async fn agent_turn(
        &mut self,
        state: StateId,
        spec: &AgentState,
        agent: &Agent,
    ) -> Result<Ended, RunError> {
        let attempt = self.cursor.visits(state);
        let inputs = self.inputs(agent, attempt)?;
        let call = self.info.call(state, spec, agent, attempt, &inputs);
        let ctx = ContextPackage::new(&call, &self.info.project.config.project, &inputs);
        let context = self
            .info
            .redactor
            .redact_json(&serde_json::to_value(&ctx).unwrap_or(Value::Null));
        self.info.files.write_context(&context)?;
        let prompt = self.info.prompt(agent, &ctx)?;
        let system_prompt = match &agent.manifest.system_prompt {
            Some(rel) => Some(self.info.render_template(rel, &ctx)?),
            None => None,
        };
        self.sink.event(&RunEvent::AgentStarted {
            run_id: call.run_id.to_owned(),
            state: call.state.to_owned(),
            agent: agent.id.clone(),
            attempt,
            bound: call.bound,
        });
        let lifecycle = self.info.project.lifecycle(agent);
        let config = &self.info.project.config;
        let sys = system_prompt.as_deref();
        let setup = agent::Setup {
            root: &config.paths.root,
            runtimes: &config.runtimes,
            commands: &config.project.commands,
        };
        let prepared = agent::prepare(&call, &setup, &prompt, sys, &self.info.redactor);
        let flight = InFlight {
            seq: self.cursor.transitions() + 1,
            state: call.state.to_owned(),
            agent: agent.id.clone(),
            attempt,
            lifecycle_fsm: lifecycle.id().to_owned(),
            argv: match &prepared {
                Ok(p) => p.argv_redacted.clone(),
                Err(e) => e.argv().to_vec(),
            },
            prompt: self.info.redactor.redact(&prompt).into_owned(),
            started_at: crate::store::now(),
            process: None,
        };
        let started = Instant::now();
        let ran = match prepared {
            Err(e) => Ran::failed_to_start(e.class(), e.to_string()),
            Ok(p) => self.run(p, &call, &flight).await,
        };
        // The process group is gone: what it left in its TMPDIR goes.
        if std::fs::read_dir(&call.tmp_dir).is_ok_and(|mut d| d.next().is_some()) {
            let _ = std::fs::remove_dir_all(&call.tmp_dir);
        }
        let seq = flight.seq;
        let mut verdict = ran.verdict;
        // What the agent answered, kept even when its work is rejected.
        let answer = verdict.output().cloned();
        // What the step changed, judged before its event is: a change the
        // agent may not make is a rejection, whatever it answered.
        let mut work = match verdict {
            Verdict::Cancelled => None,
            _ => {
                let facts = StepFacts {
                    seq: u64::from(seq),
                    state: call.state,
                    attempt,
                    agent,
                    task_spec: inputs.task_spec.as_ref(),
                };
                Some(self.work.settle(&facts, &mut verdict)?)
            }
        };
        let mut record = self
            .info
            .invocation_record(flight, context, &verdict, ran.out.as_ref());
        record.error = ran.error;
        record.process = ran.process;
        let start = lifecycle.start_step().clone();
        let Some(outcome) = verdict.outcome() else {
            record.lifecycle = vec![start.clone(), lifecycle.abandoned_step(&start.2)];
            record.status = InvocationStatus::Abandoned;
            return Ok(Ended::Interrupted(Box::new(record)));
        };
        let judge = Judge {
            work: &mut self.work,
            machine: &self.info.workflow.machine,
            at: self.cursor.position(),
            seq: u64::from(seq),
        };
        let (event, stalled) = judge.decide(spec, call.state, &mut verdict, work.as_mut())?;
        let outcome = verdict.outcome().unwrap_or(outcome);
        let (steps, completed) = lifecycle.finish_steps(outcome, verdict.output());
        record.lifecycle = std::iter::once(start).chain(steps).collect();
        record.status = if completed {
            InvocationStatus::Completed
        } else {
            InvocationStatus::Failed
        };
        record.outcome = Some(outcome);
        record.duration_ms = Some(started.elapsed().as_millis() as u64);
        record.class = verdict.failure().map(|f| f.class);
        record.reason = verdict.failure().map(|f| f.reason.clone());
        record.parsed_output = answer;
        let (mut messages, mut reason) = outcome::describe(call.state, call.output, &verdict);
        if let Some(why) = &stalled {
            reason = format!("no progress: {why}");
            messages.push(outcome::feedback_message(
                call.state,
                format!("Your last attempt made no progress: {why}."),
            ));
        }
        if let Some(w) = &work {
            reason = work_reason(reason, w);
            for note in &w.notes {
                self.sink.event(&RunEvent::Notice {
                    run_id: call.run_id.to_owned(),
                    message: note.clone(),
                });
            }
        }
        record.changes = work.map(|w| serde_json::to_value(w).unwrap_or(Value::Null));
        Ok(Ended::Turn(Box::new(Turn {
            event,
            invocation: Some(record),
            messages,
            reason: crate::text::truncate(&reason, 400).into_owned(),
            agent: Some(agent.id.clone()),
        })))
    }

    /// Spawns the agent (noting its process group in the in-flight file the
    /// moment it exists) and judges what it did.
    async fn run(&self, mut prepared: agent::Prepared, call: &Call<'_>, flight: &InFlight) -> Ran {
        let path = InFlight::path(&self.info.files.dir);
        let flight = flight.clone();
        let seen = Arc::new(Mutex::new(None));
        let noted = Arc::clone(&seen);
        prepared.spec.on_spawn = Some(Arc::new(move |pid| {
            let process = process_start_ticks(pid).map(|started| ProcessIds { pgid: pid, started });
            *noted.lock().unwrap_or_else(|p| p.into_inner()) = process;
            InFlight {
                process,
                ..flight.clone()
            }
            .write(&path);
        }));
        let retry = &self.info.project.config.runtimes.retry;
        let result = retry::run_with_retry(prepared.spec, self.cancel.clone(), retry).await;
        let process = *seen.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(out) => Ran {
                verdict: agent::judge(call, &out),
                out: Some(out),
                process,
                error: None,
            },
            Err(e) => Ran::failed_to_start(spawn_class(&e), e.to_string()),
        }
    }

    /// What earlier steps left that this agent is handed.
    fn inputs(&self, agent: &Agent, attempt: u32) -> Result<Inputs, RunError> {
        let run_id = &self.info.run.id;
        let latest = |kind: &str| -> Result<Option<Value>, RunError> {
            Ok(self.store.latest_message(run_id, kind)?.map(|m| m.payload))
        };
        let feedback = match attempt {
            1 => None,
            _ => latest("feedback")?
                .and_then(|p| p.get("text").and_then(Value::as_str).map(str::to_owned)),
        };
        // The manifest's mode, else the global default: `shared` hands the
        // agent every message of the run, `isolated` only what its role needs.
        let context_mode = agent
            .manifest
            .context
            .or(self.info.project.config.settings.context_mode)
            .unwrap_or_default();
        let history = match context_mode {
            ContextMode::Isolated => None,
            ContextMode::Shared => Some(
                self.store
                    .messages(run_id)?
                    .into_iter()
                    .map(|m| {
                        serde_json::json!({ "seq": m.seq, "kind": m.kind, "state": m.state, "payload": m.payload })
                    })
                    .collect(),
            ),
        };
        Ok(Inputs {
            task_spec: latest("task_spec")?,
            previous_result: latest("execution_result")?,
            feedback,
            context_mode,
            history,
        })
    }
}

impl super::RunInfo<'_> {
    fn call<'a>(
        &'a self,
        state: StateId,
        spec: &'a AgentState,
        agent: &'a Agent,
        attempt: u32,
        inputs: &Inputs,
    ) -> Call<'a> {
        let info = self;
        let name = &info.workflow.machine.state(state).name;
        Call {
            epic: &info.run.epic,
            run_id: &info.run.id,
            workflow: info.workflow.machine.id(),
            state: name,
            agent,
            output: &spec.output,
            attempt,
            bound: info.workflow.machine.bound_for_visits(state),
            workdir: &info.workdir,
            context_path: info.files.context(),
            schema_path: info.files.schema(&spec.output),
            strict_schema_path: info.files.strict_schema(&spec.output),
            schemas: &info.project.schemas,
            prompt_path: info.files.dir.join("prompt.txt"),
            tmp_dir: info.files.dir.join("tmp"),
            timeout: agent::timeout_for(
                &info.project.config.runtimes,
                agent,
                spec,
                name,
                inputs.task_spec.as_ref(),
            ),
            echo: info
                .stream
                .then(|| agent::stderr_echo(&agent.id, &info.redactor)),
            rules: agent.binding.shell().map(|s| info.rules(s)),
        }
    }

    /// The invocation as recorded, from what it was given and what its
    /// process did; the caller sets its lifecycle, status and outcome.
    fn invocation_record(
        &self,
        flight: InFlight,
        context: Value,
        verdict: &Verdict,
        out: Option<&ProcessOutcome>,
    ) -> NewInvocation {
        NewInvocation {
            state: flight.state,
            agent: flight.agent,
            attempt: flight.attempt,
            lifecycle_fsm: flight.lifecycle_fsm,
            lifecycle: Vec::new(),
            argv: flight.argv,
            prompt: flight.prompt,
            context,
            started_at: flight.started_at,
            process: None,
            error: None,
            status: InvocationStatus::Failed,
            outcome: None,
            exit_code: out.and_then(|o| o.exit_code),
            signal: out.and_then(|o| o.signal),
            timed_out: verdict
                .failure()
                .is_some_and(|f| f.class == FailureClass::Timeout),
            duration_ms: None,
            stdout: out.map(|o| o.stdout.bytes.clone()).unwrap_or_default(),
            stderr: out.map(|o| o.stderr.bytes.clone()).unwrap_or_default(),
            stdout_bytes: out.map_or(0, |o| o.stdout.total_bytes),
            stderr_bytes: out.map_or(0, |o| o.stderr.total_bytes),
            parsed_output: verdict.output().cloned(),
            validation_errors: verdict
                .failure()
                .map(|f| f.errors.clone())
                .unwrap_or_default(),
            class: None,
            reason: None,
            usage: None,
            changes: None,
        }
    }

    /// The agent's prompt: its template rendered, the package itself when it
    /// has none, nothing for a plain command without one.
    fn prompt(&self, agent: &Agent, ctx: &ContextPackage) -> Result<String, RunError> {
        match &agent.manifest.prompt {
            Some(rel) => self.render_template(rel, ctx),
            None if matches!(agent.binding, Binding::Command { .. }) => Ok(String::new()),
            None => Ok(default_prompt(ctx)),
        }
    }

    /// Renders a template as it was read and checked when the project
    /// loaded (never re-read: a file swapped since is not what validated).
    fn render_template(&self, rel: &str, ctx: &ContextPackage) -> Result<String, RunError> {
        let config = &self.project.config;
        let text = config.templates.get(rel).ok_or_else(|| {
            RunError::Internal(format!(
                "template `{rel}` was not read when the project loaded"
            ))
        })?;
        Ok(render_prompt(&config.paths.shown(rel), text, ctx)?)
    }
}

/// Writes `bytes` over the file's old content, then cuts what is left: unlike
/// truncating first, this reuses the file's blocks instead of freeing and
/// allocating them on every invocation.
pub(super) fn overwrite(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    file.write_all(bytes)?;
    file.set_len(bytes.len() as u64)
}

/// What decides a step's event once its work is recorded.
struct Judge<'a> {
    work: &'a mut super::work::Work,
    machine: &'a crate::fsm::Machine,
    at: &'a crate::fsm::Position,
    seq: u64,
}

impl Judge<'_> {
    /// The step's event: from the emit rules, after the evidence rules. A
    /// result that would end the run in success is bound to the tree it was
    /// about (and refused if the tree moved under it); a step that made no
    /// progress raises `no_progress` where the state has a rule for it.
    /// Returns the event and, for no progress, why.
    fn decide(
        self,
        spec: &AgentState,
        state: &str,
        verdict: &mut Verdict,
        work: Option<&mut StepWork>,
    ) -> Result<(String, Option<String>), RunError> {
        let derive = |v: &Verdict| {
            v.outcome()
                .and_then(|o| spec.derive_event(o, v.output()))
                .map(str::to_owned)
                .ok_or_else(|| {
                    // Workflows are checked when the project loads to have a
                    // rule for every outcome, so this only fails on a bug.
                    RunError::Internal(format!("state {state}: no emit rule matches the outcome"))
                })
        };
        let mut event = derive(verdict)?;
        let Some(work) = work else {
            return Ok((event, None));
        };
        if self.ends_in_success(&event) {
            self.work.bind_ending(self.seq, work, verdict)?;
            event = derive(verdict)?;
        }
        match self.work.progress(verdict, work) {
            Some(why) if self.machine.fire(self.at, NO_PROGRESS).is_ok() => {
                Ok((NO_PROGRESS.to_owned(), Some(why)))
            }
            _ => Ok((event, None)),
        }
    }

    /// Whether `event` would take the run to a success terminal from here.
    fn ends_in_success(&self, event: &str) -> bool {
        self.machine.fire(self.at, event).is_ok_and(|f| {
            matches!(
                self.machine.state(f.to).kind,
                StateKind::Terminal {
                    outcome: Ending::Success
                }
            )
        })
    }
}

/// The reason with what the record shows the step did to the files.
fn work_reason(reason: String, w: &StepWork) -> String {
    let mut parts = vec![reason];
    if w.write || !w.empty || w.rejected.is_some() {
        let mut said = w.summary();
        if let (Some(claimed), true) = (&w.claimed, w.claim_mismatch) {
            said.push_str(&format!("; it claimed {}", list_or_none(claimed)));
        }
        parts.push(said);
    }
    if let Some(v) = &w.verified {
        parts.push(format!(
            "verified on commit {}",
            &v.commit[..v.commit.len().min(10)]
        ));
    }
    parts.join(" · ")
}

fn list_or_none(paths: &[String]) -> String {
    if paths.is_empty() {
        "none".to_owned()
    } else {
        paths.join(", ")
    }
}

/// The turn of an input state: it raises its event with the epic.
pub(super) fn input_turn(event: &str, state: &str, epic: &str) -> Turn {
    Turn {
        event: event.to_owned(),
        invocation: None,
        messages: vec![NewMessage {
            kind: "epic".into(),
            state: state.to_owned(),
            payload: serde_json::json!({ "epic": epic }),
        }],
        reason: "epic received".to_owned(),
        agent: None,
    }
}
