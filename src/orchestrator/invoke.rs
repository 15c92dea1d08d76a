//! One agent state's turn, in four steps: gather the inputs earlier steps
//! left ([`Inputs`]), make the invocation's facts ([`Call`]) and from them
//! its context package and prompt, run the agent (prepare, spawn, judge),
//! and turn the verdict into a [`Turn`] that the driver commits as is.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::agent::{self, Verdict};
use super::context::{ContextPackage, default_prompt, render_prompt};
use super::events::RunEvent;
use super::{Driver, RunError, outcome, retry};
use crate::config::{Agent, Binding, ContextMode};
use crate::fsm::{AgentState, StateId};
use crate::shell::{EchoFn, ProcessOutcome};
use crate::store::{InvocationEnd, InvocationId, InvocationStatus, NewInvocation, NewMessage};

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
    pub timeout: Duration,
    pub echo: Option<EchoFn>,
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
    pub invocation: Option<(InvocationId, InvocationEnd)>,
    pub messages: Vec<NewMessage>,
    pub reason: String,
    pub agent: Option<String>,
}

impl Driver<'_> {
    /// Runs the agent of an agent state; `None` when the run was interrupted
    /// while it ran.
    pub(super) async fn agent_turn(
        &mut self,
        state: StateId,
        spec: &AgentState,
        agent: &Agent,
    ) -> Result<Option<Turn>, RunError> {
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
        // A missing binary is the agent's failure (an event), not modix's.
        let root = &self.info.project.config.paths.root;
        let prepared = agent::locate(root, agent).and_then(|program| {
            let runtimes = &self.info.project.config.runtimes;
            let sys = system_prompt.as_deref();
            agent::prepare(&call, program, &prompt, sys, runtimes, &self.info.redactor)
        });
        let id = self.store.start_invocation(&NewInvocation {
            run_id: call.run_id.to_owned(),
            state: call.state.to_owned(),
            agent: agent.id.clone(),
            attempt,
            lifecycle_fsm: lifecycle.id().to_owned(),
            lifecycle_start: lifecycle.start_step().clone(),
            argv: prepared
                .as_ref()
                .map(|p| p.argv_redacted.clone())
                .unwrap_or_default(),
            prompt: self.info.redactor.redact(&prompt).into_owned(),
            context,
        })?;
        let started = Instant::now();
        let (verdict, process) = match prepared {
            Err(e) => (Verdict::ProcessError(e.to_string()), None),
            Ok(p) => {
                let retry = &self.info.project.config.runtimes.retry;
                match retry::run_with_retry(p.spec, self.cancel.clone(), retry).await {
                    Ok(out) => (agent::judge(agent, call.output, &out), Some(out)),
                    Err(e) => (Verdict::ProcessError(e.to_string()), None),
                }
            }
        };
        let Some(outcome) = verdict.outcome() else {
            return Ok(None);
        };
        // Workflows are checked when the project loads to have a rule for
        // every outcome, so this only fails on a bug.
        let event = spec
            .derive_event(outcome, verdict.output())
            .ok_or_else(|| {
                RunError::Internal(format!(
                    "state {}: no emit rule matches outcome `{outcome}`",
                    call.state
                ))
            })?
            .to_owned();
        let (lifecycle_steps, completed) = lifecycle.finish_steps(outcome, verdict.output());
        let (messages, reason) = outcome::describe(call.state, call.output, &verdict);
        let end = InvocationEnd {
            status: if completed {
                InvocationStatus::Completed
            } else {
                InvocationStatus::Failed
            },
            outcome: Some(outcome),
            duration_ms: Some(started.elapsed().as_millis() as u64),
            lifecycle: lifecycle_steps,
            ..self.info.process_record(&verdict, process.as_ref())
        };
        Ok(Some(Turn {
            event,
            invocation: Some((id, end)),
            messages,
            reason,
            agent: Some(agent.id.clone()),
        }))
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
        }
    }

    /// The parts of the invocation's record that come from its process,
    /// redacted.
    fn process_record(&self, verdict: &Verdict, out: Option<&ProcessOutcome>) -> InvocationEnd {
        let redact = |s: &str| self.redactor.redact(s).into_owned();
        InvocationEnd {
            status: InvocationStatus::Failed,
            outcome: None,
            exit_code: out.and_then(|o| o.exit_code),
            signal: out.and_then(|o| o.signal),
            timed_out: matches!(verdict, Verdict::Timeout(_)),
            duration_ms: None,
            stdout: out.map(|o| redact(&o.stdout.text())).unwrap_or_default(),
            stderr: out.map(|o| redact(&o.stderr.text())).unwrap_or_default(),
            stdout_bytes: out.map_or(0, |o| o.stdout.total_bytes),
            stderr_bytes: out.map_or(0, |o| o.stderr.total_bytes),
            parsed_output: verdict.output().map(|v| self.redactor.redact_json(v)),
            validation_errors: match verdict {
                Verdict::Invalid(errs) => errs.clone(),
                _ => Vec::new(),
            },
            lifecycle: Vec::new(),
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

    fn render_template(&self, rel: &str, ctx: &ContextPackage) -> Result<String, RunError> {
        let paths = &self.project.config.paths;
        let shown = paths.shown(rel);
        let text = std::fs::read_to_string(paths.file(rel)).map_err(|source| {
            RunError::io(format!("cannot read prompt template {shown}"), source)
        })?;
        Ok(render_prompt(&shown, &text, ctx)?)
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
