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
use super::driver::Herald;
use super::events::RunEvent;
use super::inflight::InFlight;
use super::inputs::Inputs;
use super::work::{StepFacts, StepWork, Work};
use super::{Driver, RunError, outcome, retry};
use crate::config::{Agent, Binding, Durability};
use crate::fsm::{AgentState, Ending, FailureClass, NO_PROGRESS, StateId, StateKind};
use crate::shell::{EchoFn, ProcessOutcome};
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

/// What one state's turn came to, ready to commit: the event it raises and
/// what the step records with it.
pub(super) struct Turn {
    pub event: String,
    pub invocation: Option<NewInvocation>,
    pub messages: Vec<NewMessage>,
    pub reason: String,
    pub agent: Option<String>,
    /// Pending messages its agent was handed (marked delivered with the step).
    pub delivered: Vec<i64>,
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
    /// Stopped by Ctrl-C or SIGTERM while the agent ran (the invocation,
    /// to record as abandoned) or while it waited to run again (nothing
    /// more to record); a resume runs it again.
    Interrupted(Option<Box<NewInvocation>>),
}

/// One attempt of an invocation, judged and settled, not yet recorded.
struct Tried {
    verdict: Verdict,
    record: NewInvocation,
    work: Option<StepWork>,
    /// What the agent answered, kept even when its work is rejected.
    answer: Option<Value>,
    /// What a test command judged by its exit status printed: the evidence
    /// that its tests ran.
    printed: Option<String>,
    started: Instant,
}

/// An attempt's process, ready to start ([`RunInfo::ready`]).
struct Ready {
    prepared: Result<agent::Prepared, agent::PrepareError>,
    flight: InFlight,
    /// Why the budget does not let it start.
    spent: Option<String>,
}

/// What an agent state's turn has ready before any attempt: its call and
/// the texts every attempt gets.
struct Materials {
    /// The context package as the agent reads it: JSON, secrets redacted.
    context: String,
    prompt: String,
    system_prompt: Option<String>,
}

impl Driver<'_> {
    /// Runs the agent of an agent state: attempts it, runs it again after a
    /// wait while its state's `retry` rule says so (each failed attempt on
    /// record; no loop bound spent, no feedback), and turns the last
    /// attempt into the step.
    pub(super) async fn agent_turn(
        &mut self,
        state: StateId,
        spec: &AgentState,
        agent: &Agent,
    ) -> Result<Ended, RunError> {
        let attempt = self.cursor.visits(state);
        let inputs = self.inputs(state, agent, attempt)?;
        let call = self.info.call(state, spec, agent, attempt, &inputs);
        let materials = self.materials(&call, &inputs)?;
        let seq = self.cursor.transitions() + 1;
        let mut ready = Some(self.info.ready(&self.store, seq, &call, &materials)?);
        // The last step, said once on disk, then the agent's start: before
        // the agent starts (its fsync ran while the prompt, the context and
        // the process were made), or with `durability: pipelined` once it
        // has started, by its first attempt.
        let started = RunEvent::AgentStarted {
            run_id: call.run_id.to_owned(),
            state: call.state.to_owned(),
            agent: agent.id.clone(),
            attempt,
            bound: call.bound,
        };
        let mut unsaid = Some((self.unannounced.take(), started));
        if self.info.project.config.runtimes.durability == Durability::Full {
            let herald = Herald::lend(&mut unsaid, &mut self.state_file, &mut *self.sink);
            herald.map_or(Ok(()), |h| h.say(&self.info))?;
        }
        let mut retried = 0;
        loop {
            let ready = match ready.take() {
                Some(r) => r,
                None => self.info.ready(&self.store, seq, &call, &materials)?,
            };
            let herald = Herald::lend(&mut unsaid, &mut self.state_file, &mut *self.sink);
            let mut tried = self
                .info
                .attempt(
                    &self.store,
                    &mut self.work,
                    &self.cancel,
                    ready,
                    &call,
                    &inputs,
                    &materials,
                    std::mem::take(&mut self.leftovers),
                    herald,
                )
                .await?;
            let Some(outcome) = tried.verdict.outcome() else {
                let lifecycle = self.info.project.lifecycle(agent);
                let start = lifecycle.start_step().clone();
                tried.record.lifecycle = vec![start.clone(), lifecycle.abandoned_step(&start.2)];
                tried.record.status = InvocationStatus::Abandoned;
                return Ok(Ended::Interrupted(Some(Box::new(tried.record))));
            };
            let retry = tried.verdict.failure().and_then(|f| {
                let wait = spec.retry_after(f.class, retried, retry::random_fraction())?;
                Some((f.class, f.reason.clone(), wait))
            });
            let Some((class, reason, wait)) = retry else {
                // Said before the agent started: events go out in order.
                debug_assert!(self.unannounced.is_none());
                let sink = &mut *self.sink;
                let mut turn = self.info.finish(
                    &mut self.work,
                    &self.cursor,
                    sink,
                    &call,
                    spec,
                    tried,
                    retried,
                )?;
                turn.delivered = inputs.pending_ids.clone();
                self.leftovers.keep(inputs);
                self.leftovers.keep(materials);
                return Ok(Ended::Turn(Box::new(turn)));
            };
            retried += 1;
            self.info.close_record(&call, &mut tried, outcome);
            tried.record.retry = Some(serde_json::json!({
                "retry": retried,
                "of": spec.max_retries(),
                "wait_ms": wait.as_millis() as u64,
                "class": class,
            }));
            self.store
                .record_abandoned(&self.info.run.id, &tried.record)?;
            self.sink.event(&RunEvent::Retrying {
                run_id: call.run_id.to_owned(),
                state: call.state.to_owned(),
                agent: agent.id.clone(),
                class,
                reason,
                retry: retried,
                of: spec.max_retries(),
                wait_ms: wait.as_millis() as u64,
            });
            if wait_or_cancel(&self.cancel, wait).await {
                return Ok(Ended::Interrupted(None));
            }
        }
    }

    /// The context package (written where the agent reads it) and the
    /// prompts, the same for every attempt of the turn.
    fn materials(&self, call: &Call<'_>, inputs: &Inputs) -> Result<Materials, RunError> {
        let ctx = ContextPackage::new(call, &self.info.project.config.project, inputs);
        let context = ctx.text(&self.info.texts);
        self.info.files.write_context(&context)?;
        let prompt = self.info.prompt(call.agent, &ctx)?;
        let system_prompt = match &call.agent.manifest.system_prompt {
            Some(rel) => Some(self.info.render_template(rel, &ctx)?),
            None => None,
        };
        Ok(Materials {
            context,
            prompt,
            system_prompt,
        })
    }
}

/// The context package as recorded, from the text its agent read.
fn context_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

impl super::RunInfo<'_> {
    /// An attempt's process made ready: its command line and environment,
    /// what the in-flight file will say, and whether the budget lets it
    /// start. None of it depends on the last step being durable, so the
    /// first attempt's is made while that step's sync runs.
    fn ready(
        &self,
        store: &crate::store::Store,
        seq: u32,
        call: &Call<'_>,
        m: &Materials,
    ) -> Result<Ready, RunError> {
        let spent = super::budget::spent(self, || store.run_usage(call.run_id))?;
        let agent = call.agent;
        let config = &self.project.config;
        let setup = agent::Setup {
            root: &config.paths.root,
            inherited: &self.inherited,
            programs: &self.programs,
            tmp_seen: &self.tmp_seen,
            runtimes: &config.runtimes,
            commands: &config.project.commands,
        };
        let sys = m.system_prompt.as_deref();
        let prepared = agent::prepare(call, &setup, &m.prompt, sys, self.redactor());
        let flight = InFlight {
            seq,
            state: call.state.to_owned(),
            agent: agent.id.clone(),
            attempt: call.attempt,
            lifecycle_fsm: self.project.lifecycle(agent).id().to_owned(),
            argv: match &prepared {
                Ok(p) => p.argv_redacted.clone(),
                Err(e) => e.argv().to_vec(),
            },
            prompt: self.redactor().redact(&m.prompt).into_owned(),
            // Set again as it starts.
            started_at: String::new(),
            process: None,
        };
        Ok(Ready {
            prepared,
            flight,
            spent,
        })
    }

    /// One attempt: the process prepared and run, its answer judged, and
    /// what it changed settled and judged — before its event is decided: a
    /// change the agent may not make is a rejection, whatever it answered.
    /// Its process is `ready` (made while the last step's sync ran, see
    /// [`RunInfo::ready`]); when the run's budget is spent, not started.
    /// The last step's `leftovers` are freed once the process has started,
    /// and what the `herald` has to say (the last step, with `durability:
    /// pipelined`) is said then, once on disk: should that sync fail, the
    /// agent is stopped and the attempt fails with it.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        store: &crate::store::Store,
        work: &mut Work,
        cancel: &Cancel,
        ready: Ready,
        call: &Call<'_>,
        inputs: &Inputs,
        m: &Materials,
        leftovers: super::driver::Leftovers,
        herald: Option<Herald<'_>>,
    ) -> Result<Tried, RunError> {
        let Ready {
            prepared,
            mut flight,
            spent,
        } = ready;
        let agent = call.agent;
        flight.started_at = crate::store::now();
        let started = Instant::now();
        let mut texts = None;
        let mut context = None;
        let mut said = Ok(());
        let say = |herald: Option<Herald<'_>>| herald.map_or(Ok(()), |h| h.say(self));
        let ran = match (spent, prepared) {
            (Some(why), _) => {
                said = say(herald);
                Ran::failed_to_start(FailureClass::BudgetExceeded, why)
            }
            (None, Err(e)) => {
                said = say(herald);
                Ran::failed_to_start(e.class(), e.to_string())
            }
            (None, Ok(p)) => {
                let spawned = Spawned::default();
                // The record's texts are made while the agent runs (this
                // future's turn comes once the process is started, `biased`
                // keeps it second): the step's commit then only writes them.
                // First, with `durability: pipelined`, the last step is said
                // once its sync, now beside the agent's start, returns.
                let texts = async {
                    said = say(herald);
                    if said.is_err() {
                        spawned.kill();
                    }
                    let value = context_value(&m.context);
                    let quotes = inputs.quotes();
                    texts = store
                        .input_texts(&flight.argv, &flight.prompt, &value, &quotes)
                        .ok();
                    context = Some(value);
                    drop(leftovers);
                };
                tokio::join!(biased; self.run(cancel, p, call, &flight, &spawned), texts).0
            }
        };
        said?;
        let context = context.unwrap_or_else(|| context_value(&m.context));
        let seq = u64::from(flight.seq);
        let mut verdict = ran.verdict;
        let answer = verdict.output().cloned();
        let printed = ran.out.as_ref().and_then(|o| agent::test_output(call, o));
        let work = match verdict {
            Verdict::Cancelled => None,
            _ => {
                let facts = StepFacts {
                    seq,
                    state: call.state,
                    attempt: call.attempt,
                    agent,
                    task_spec: inputs.task_spec.as_ref(),
                };
                match work.settle(&facts, &mut verdict) {
                    Ok(settled) => Some(settled),
                    // A stop (Ctrl-C, SIGTERM) arrived while modix's own git
                    // recorded the step, and ended that git: the step is
                    // interrupted as its agent would have been, and what it
                    // left is recorded and discarded when the run resumes.
                    Err(_) if crate::stops::caught() => {
                        verdict = Verdict::Cancelled;
                        None
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let mut record = self.invocation_record(flight, context, &verdict, ran.out.as_ref());
        record.texts = texts;
        record.error = ran.error;
        record.process = ran.process;
        Ok(Tried {
            verdict,
            record,
            work,
            answer,
            printed,
            started,
        })
    }

    /// Fills in how the attempt's invocation ended: its lifecycle, status,
    /// outcome, class and what it changed.
    fn close_record(&self, call: &Call<'_>, tried: &mut Tried, outcome: crate::fsm::Outcome) {
        let lifecycle = self.project.lifecycle(call.agent);
        let start = lifecycle.start_step().clone();
        let (steps, completed) = lifecycle.finish_steps(outcome, tried.verdict.output());
        let r = &mut tried.record;
        r.lifecycle = std::iter::once(start).chain(steps).collect();
        r.status = if completed {
            InvocationStatus::Completed
        } else {
            InvocationStatus::Failed
        };
        r.outcome = Some(outcome);
        r.duration_ms = Some(tried.started.elapsed().as_millis() as u64);
        r.class = tried.verdict.failure().map(|f| f.class);
        r.reason = tried.verdict.failure().map(|f| f.reason.clone());
        r.parsed_output = tried.answer.clone();
        r.usage = super::budget::usage(call, &r.stdout);
        r.changes = tried
            .work
            .as_ref()
            .map(|w| serde_json::to_value(w).unwrap_or(Value::Null));
    }

    /// The last attempt as the step to commit: its event (caught, no
    /// progress, or the emit rules'), messages and reason.
    #[allow(clippy::too_many_arguments)] // the driver's parts it needs, lent apart
    fn finish(
        &self,
        work: &mut Work,
        cursor: &super::cursor::Cursor,
        sink: &mut dyn super::EventSink,
        call: &Call<'_>,
        spec: &AgentState,
        mut tried: Tried,
        retried: u32,
    ) -> Result<Turn, RunError> {
        let judge = Judge {
            work,
            machine: &self.workflow.machine,
            at: cursor.position(),
            seq: u64::from(cursor.transitions() + 1),
        };
        let tests = tried.printed.as_deref().map(|printed| TestRun {
            argv: match &call.agent.binding {
                crate::config::Binding::Command { argv } => argv.as_slice(),
                crate::config::Binding::Shell { .. } => &[],
            },
            printed,
        });
        let (event, stalled) = judge.decide(
            spec,
            call.state,
            &mut tried.verdict,
            tried.work.as_mut(),
            tests,
        )?;
        let outcome = tried
            .verdict
            .outcome()
            .ok_or_else(|| RunError::Internal("a cancelled attempt reached its step".into()))?;
        self.close_record(call, &mut tried, outcome);
        let (mut messages, mut reason) = outcome::describe(call.state, call.output, &tried.verdict);
        if let Some(why) = &stalled {
            reason = format!("no progress: {why}");
            messages.push(outcome::feedback_message(
                call.state,
                format!("Your last attempt made no progress: {why}."),
            ));
        }
        if retried > 0 {
            let n = if retried == 1 {
                "1 retry".to_owned()
            } else {
                format!("{retried} retries")
            };
            reason = format!("{reason} (after {n})");
        }
        if let Some(w) = &tried.work {
            reason = work_reason(reason, w);
            for note in &w.notes {
                sink.event(&RunEvent::Notice {
                    run_id: call.run_id.to_owned(),
                    message: note.clone(),
                });
            }
        }
        Ok(Turn {
            event,
            invocation: Some(tried.record),
            messages,
            reason: crate::text::truncate(&reason, 400).into_owned(),
            agent: Some(call.agent.id.clone()),
            delivered: Vec::new(),
        })
    }

    /// Spawns the agent (noting its process group in the in-flight file the
    /// moment it exists) and judges what it did.
    async fn run(
        &self,
        cancel: &Cancel,
        mut prepared: agent::Prepared,
        call: &Call<'_>,
        flight: &InFlight,
        spawned: &Spawned,
    ) -> Ran {
        let path = InFlight::path(&self.files.dir);
        let flight = flight.clone();
        let noted = Spawned(Arc::clone(&spawned.0));
        prepared.spec.on_spawn = Some(Arc::new(move |pid, started: Option<u64>| {
            let process = started.map(|started| ProcessIds { pgid: pid, started });
            noted.noted(pid, process);
            InFlight {
                process,
                ..flight.clone()
            }
            .write(&path);
        }));
        let deadline = super::budget::Deadline::apply(self, &mut prepared.spec);
        let retry = &self.project.config.runtimes.retry;
        let result = retry::run_with_retry(prepared.spec, cancel.clone(), retry).await;
        let process = spawned.ids();
        match result {
            Ok(out) => Ran {
                verdict: deadline.judge(agent::judge(call, &out)),
                out: Some(out),
                process,
                error: None,
            },
            Err(e) => Ran::failed_to_start(spawn_class(&e), e.to_string()),
        }
    }

    pub(super) fn call<'a>(
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
                .then(|| agent::stderr_echo(&agent.id, info.redactor())),
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
            retry: None,
            texts: None,
        }
    }

    /// The agent's prompt: its template rendered, the package itself when it
    /// has none, nothing for a plain command without one.
    pub(super) fn prompt(&self, agent: &Agent, ctx: &ContextPackage) -> Result<String, RunError> {
        match &agent.manifest.prompt {
            Some(rel) => self.render_template(rel, ctx),
            None if matches!(agent.binding, Binding::Command { .. }) => Ok(String::new()),
            None => Ok(default_prompt(ctx)),
        }
    }

    /// Renders a template as it was read and checked when the project
    /// loaded (never re-read: a file swapped since is not what validated).
    pub(super) fn render_template(
        &self,
        rel: &str,
        ctx: &ContextPackage,
    ) -> Result<String, RunError> {
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
    use std::io::{Seek, Write};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    file.write_all(bytes)?;
    // Cut only what is left of a longer old content: a truncate to the
    // size the file already has still goes through the filesystem's
    // truncate path. The size is read with a seek, not a stat: a file
    // whose times were read since its last change gets fine-grained times
    // at the next, which also moves the coarse clock every other file's
    // times come from (Linux's multigrain timestamps) — so the store's
    // log would get a new mtime at every commit, and on a filesystem
    // without a journal its `fdatasync` would write the inode too.
    if file.seek(std::io::SeekFrom::End(0))? > bytes.len() as u64 {
        file.set_len(bytes.len() as u64)?;
    }
    Ok(())
}

/// Ctrl-C and SIGTERM, as the engine hands them to a run.
type Cancel = tokio::sync::watch::Receiver<bool>;

/// An attempt's process as its spawn noted it (the in-flight file's ids,
/// when its start time could be read), and whether it must be stopped.
#[derive(Default)]
struct Spawned(Arc<Mutex<Noted>>);

#[derive(Default)]
struct Noted {
    pgid: Option<u32>,
    ids: Option<ProcessIds>,
    stopped: bool,
}

impl Spawned {
    fn lock(&self) -> std::sync::MutexGuard<'_, Noted> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ids(&self) -> Option<ProcessIds> {
        self.lock().ids
    }

    /// The hook of the spawn: the process noted, and stopped at once if
    /// [`Spawned::kill`] came first (a spawn retried after a transient
    /// failure starts after the step's sync).
    fn noted(&self, pgid: u32, ids: Option<ProcessIds>) {
        let mut n = self.lock();
        (n.pgid, n.ids) = (Some(pgid), ids);
        if n.stopped {
            kill_group(pgid);
        }
    }

    /// Stops the agent's whole group, now or as it starts: the run cannot
    /// go on (its last step did not reach the disk), so nothing the agent
    /// does would count.
    fn kill(&self) {
        let mut n = self.lock();
        n.stopped = true;
        if let Some(pgid) = n.pgid {
            kill_group(pgid);
        }
    }
}

/// SIGKILL to a group whose leader is ours and not reaped yet (so the id
/// is still its own).
fn kill_group(pgid: u32) {
    if let Some(pgid) = i32::try_from(pgid).ok().filter(|p| *p > 0) {
        let group = nix::unistd::Pid::from_raw(pgid);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    }
}

/// Sleeps `wait`, or less if Ctrl-C or SIGTERM comes first (`true`).
async fn wait_or_cancel(cancel: &Cancel, wait: std::time::Duration) -> bool {
    let mut cancel = cancel.clone();
    if *cancel.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(wait) => false,
        _ = cancel.wait_for(|stop| *stop) => true,
    }
}

/// A test command's run: its command line and what it printed.
pub(super) struct TestRun<'a> {
    pub argv: &'a [String],
    pub printed: &'a str,
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
        tests: Option<TestRun<'_>>,
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
        // A class the state catches goes where its catch rule says.
        if let Some(event) = verdict.failure().and_then(|f| spec.caught(f.class)) {
            return Ok((event.to_owned(), None));
        }
        let Some(work) = work else {
            return Ok((derive(verdict)?, None));
        };
        // A pass is weighed against what the runner says ran before the
        // emit rules see it: a test command that exits 0 having run no
        // tests (or fewer than before) has not passed.
        if let Some(t) = tests {
            self.work.weigh_tests(self.seq, &t, verdict, work);
        }
        let mut event = derive(verdict)?;
        if self.ends_in_success(&event) {
            self.work.bind_ending(self.seq, work, verdict)?;
            event = derive(verdict)?;
        }
        match self.work.progress(verdict, work) {
            Some(why) if self.machine.has_transition(self.at.state(), NO_PROGRESS) => {
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
        let summary = w.summary();
        let claimed = match (&w.claimed, w.claim_mismatch) {
            (Some(claimed), true) => format!("; it claimed {}", list_or_none(claimed)),
            _ => String::new(),
        };
        // A rejection's reason is already the summary: said once.
        if parts[0].contains(&summary) {
            parts[0].push_str(&claimed);
        } else {
            parts.push(summary + &claimed);
        }
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

/// The step a person's answer to a gate makes: its event, their note on
/// record (and handed to the next agents).
pub(super) fn human_turn(a: &super::Answer, state: &str) -> Turn {
    let note = a
        .note
        .as_deref()
        .map(|n| format!(": {n}"))
        .unwrap_or_default();
    Turn {
        event: a.event.clone(),
        invocation: None,
        messages: note_message(state, &a.event, a.note.as_deref(), &a.by),
        reason: format!("{} by {}{note}", a.event, a.by),
        agent: None,
        delivered: Vec::new(),
    }
}

/// A person's note, as the message the next agents are handed.
pub(super) fn note_message(
    state: &str,
    event: &str,
    note: Option<&str>,
    by: &str,
) -> Vec<NewMessage> {
    vec![NewMessage {
        kind: "note".into(),
        state: state.to_owned(),
        payload: serde_json::json!({
            "event": event,
            "note": note,
            "by": by,
            "at": crate::store::now(),
        }),
    }]
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
        delivered: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    /// What `overwrite` leaves is exactly the new content, whether the old
    /// one was longer, shorter or missing.
    #[test]
    fn overwrite_leaves_exactly_the_new_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("context.json");
        for text in [
            "a longer first content",
            "short",
            "",
            "longer again, and more",
        ] {
            super::overwrite(&path, text.as_bytes()).unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        }
    }
}
