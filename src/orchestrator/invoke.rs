//! One agent state's step: the context package and prompt, the invocation
//! under the agent's lifecycle FSM, and what its outcome leaves behind (the
//! event, the messages, the reason) for the caller to commit.

use std::time::Instant;

use serde_json::{Value, json};

use super::{
    ContextPackage, Driver, Observer, OrchestratorError, Verdict, agent, context, history,
    lifecycle, outcome, render_prompt, retry, workspace, write_file,
};
use crate::config::{Agent, Binding, ContextMode, MODIX_DIR};
use crate::fsm::{AgentState, Fired, Position};
use crate::schema;
use crate::store::{
    InvocationEnd, InvocationId, InvocationStatus, NewInvocation, NewMessage,
    Outcome as StoredOutcome,
};

pub(super) type StepParts = (
    Fired,
    Option<(InvocationId, InvocationEnd)>,
    Vec<NewMessage>,
    String,
    Option<String>,
);

impl Driver<'_> {
    /// Invokes the agent of an agent state; `None` when interrupted.
    pub(super) async fn invoke(
        &mut self,
        pos: &Position,
        state: &AgentState,
        workdir: &std::path::Path,
        observer: &mut dyn Observer,
    ) -> Result<Option<StepParts>, OrchestratorError> {
        let config = self.config;
        let state_name = self.machine.state(pos.state()).name.clone();
        let agent: &Agent = config
            .agent_for(&state.agent)
            .map_err(OrchestratorError::Agent)?;
        let attempt = history::visits(&self.machine, &self.history, pos.state());
        let bound = self.machine.bound_for_visits(pos.state());
        let output_schema = state.output.as_str();
        let run_dir = workspace::run_dir(&config.paths, &self.run.id);
        let schema_path = run_dir
            .join("schemas")
            .join(format!("{output_schema}.schema.json"));
        // Embedded schemas never change within a run: write each once.
        if !schema_path.is_file() {
            let schema_text = if output_schema == "any" {
                "{}"
            } else {
                schema::text(output_schema).unwrap_or("{}")
            };
            write_file(&schema_path, schema_text.as_bytes())?;
        }

        let task_spec = self
            .store
            .latest_message(&self.run.id, "task_spec")?
            .map(|m| m.payload);
        let previous_result = self
            .store
            .latest_message(&self.run.id, "execution_result")?
            .map(|m| m.payload);
        let feedback = match attempt {
            1 => None,
            _ => self
                .store
                .latest_message(&self.run.id, "feedback")?
                .and_then(|m| {
                    m.payload
                        .get("text")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                }),
        };
        // The manifest's mode, else the global default: `shared` hands the
        // agent every message of the run, `isolated` only what its role needs.
        let context_mode = agent
            .manifest
            .context
            .or(config.settings.context_mode)
            .unwrap_or_default();
        let history = match context_mode {
            ContextMode::Isolated => None,
            ContextMode::Shared => Some(
                self.store
                    .messages(&self.run.id)?
                    .into_iter()
                    .map(|m| json!({ "seq": m.seq, "kind": m.kind, "state": m.state, "payload": m.payload }))
                    .collect(),
            ),
        };
        let ctx = ContextPackage {
            epic: self.run.epic.clone(),
            run_id: self.run.id.clone(),
            workflow: self.machine.id().to_owned(),
            state: state_name.clone(),
            agent: agent.id.clone(),
            role: agent.role.clone(),
            attempt,
            bound,
            workdir: workdir.display().to_string(),
            output_schema: output_schema.to_owned(),
            output_schema_path: schema_path.display().to_string(),
            project: context::ProjectContext::from(&config.project),
            brain: match &agent.binding {
                Binding::Shell { brain, .. } => config.brains.get(brain).map(|b| {
                    json!({
                        "name": brain,
                        "provider": b.provider,
                        "model": b.model,
                        "endpoint": b.endpoint,
                        "params": b.params,
                    })
                }),
                Binding::Command { .. } => None,
            },
            task_spec: task_spec.clone(),
            previous_result,
            feedback,
            context_mode,
            history,
        };
        let ctx_value = self
            .redactor
            .redact_json(&serde_json::to_value(&ctx).unwrap_or(Value::Null));
        // One file per run, rewritten in place: only the agent about to start
        // reads it, and each invocation's context is also kept in the store.
        let ctx_path = run_dir.join("context.json");
        let ctx_text = serde_json::to_string_pretty(&ctx_value).unwrap_or_default() + "\n";
        overwrite(&ctx_path, ctx_text.as_bytes()).map_err(|source| OrchestratorError::Io {
            what: format!("cannot write {}", ctx_path.display()),
            source,
        })?;
        let prompt = self.prompt(agent, &ctx)?;
        let system_prompt = match &agent.manifest.system_prompt {
            Some(rel) => Some(self.render_file(rel, &ctx)?),
            None => None,
        };
        let timeout = agent::timeout_for(config, agent, state, &state_name, task_spec.as_ref());
        let inv = agent::Invocation {
            config,
            agent,
            state: &state_name,
            prompt,
            system_prompt,
            workdir: workdir.to_path_buf(),
            output_schema_path: schema_path,
            context_path: ctx_path,
            run_id: &self.run.id,
            attempt,
            timeout,
            echo: self
                .stream
                .then(|| agent::stderr_echo(&agent.id, &self.redactor)),
        };
        let lifecycle = self
            .catalog
            .get(&agent.fsm)
            .cloned()
            .ok_or_else(|| format!("lifecycle FSM `{}` is not defined", agent.fsm))
            .and_then(lifecycle::Lifecycle::new)
            .map_err(OrchestratorError::Workflow)?;
        observer.agent_started(&state_name, &agent.id, attempt, bound);

        let prepared = agent::prepare(&inv, &self.redactor);
        // A missing binary is the agent's failure (an event), not modix's.
        let (argv, spec, prepare_error) = match prepared {
            Ok(p) => (p.argv_redacted, Some(p.spec), None),
            Err(e) => (Vec::new(), None, Some(e.to_string())),
        };
        let inv_id = self.store.start_invocation(&NewInvocation {
            run_id: self.run.id.clone(),
            state: state_name.clone(),
            agent: agent.id.clone(),
            attempt,
            lifecycle_fsm: agent.fsm.clone(),
            lifecycle_start: lifecycle.start_step(),
            argv,
            prompt: self.redactor.redact(&inv.prompt).into_owned(),
            context: ctx_value,
        })?;
        let started = Instant::now();
        let (verdict, outcome) = match spec {
            None => (
                Verdict::ProcessError(prepare_error.unwrap_or_default()),
                None,
            ),
            Some(spec) => {
                match retry::run_with_retry(spec, self.cancel.clone(), &config.runtimes.retry).await
                {
                    Ok(out) => {
                        let shell = match &agent.binding {
                            Binding::Shell { shell, .. } => config.shells.get(shell),
                            Binding::Command { .. } => None,
                        };
                        (agent::judge(agent, shell, output_schema, &out), Some(out))
                    }
                    Err(e) => (Verdict::ProcessError(e.to_string()), None),
                }
            }
        };
        let Some(inv_outcome) = verdict.as_outcome() else {
            return Ok(None);
        };
        let event = state.derive_event(&inv_outcome).map(str::to_owned).ok_or_else(|| {
            OrchestratorError::Workflow(format!(
                "state {state_name}: no emit rule matches outcome `{}`; add a rule for it to the workflow",
                verdict.outcome_name()
            ))
        })?;
        let fired = self.fire(pos, &event)?;
        let (lifecycle_steps, completed) = lifecycle.finish_steps(&inv_outcome);
        let (messages, reason) = outcome::describe(&state_name, output_schema, &verdict);
        let end = InvocationEnd {
            status: if completed {
                InvocationStatus::Completed
            } else {
                InvocationStatus::Failed
            },
            outcome: verdict.outcome_name().parse::<StoredOutcome>().ok(),
            exit_code: outcome.as_ref().and_then(|o| o.exit_code),
            signal: outcome.as_ref().and_then(|o| o.signal),
            timed_out: matches!(verdict, Verdict::Timeout(_)),
            duration_ms: Some(started.elapsed().as_millis() as u64),
            stdout: outcome
                .as_ref()
                .map(|o| self.redactor.redact(&o.stdout.text).into_owned())
                .unwrap_or_default(),
            stderr: outcome
                .as_ref()
                .map(|o| self.redactor.redact(&o.stderr.text).into_owned())
                .unwrap_or_default(),
            stdout_bytes: outcome.as_ref().map_or(0, |o| o.stdout.total_bytes),
            stderr_bytes: outcome.as_ref().map_or(0, |o| o.stderr.total_bytes),
            parsed_output: match &verdict {
                Verdict::Output(v) => Some(self.redactor.redact_json(v)),
                _ => None,
            },
            validation_errors: match &verdict {
                Verdict::Invalid(errs) => errs.clone(),
                _ => Vec::new(),
            },
            lifecycle: lifecycle_steps,
        };
        Ok(Some((
            fired,
            Some((inv_id, end)),
            messages,
            reason,
            Some(agent.id.clone()),
        )))
    }

    fn prompt(&self, agent: &Agent, ctx: &ContextPackage) -> Result<String, OrchestratorError> {
        match &agent.manifest.prompt {
            Some(rel) => self.render_file(rel, ctx),
            None if matches!(agent.binding, Binding::Command { .. }) => Ok(String::new()),
            None => Ok(context::default_prompt(ctx)),
        }
    }

    fn render_file(&self, rel: &str, ctx: &ContextPackage) -> Result<String, OrchestratorError> {
        let path = self.config.paths.modix_dir.join(rel);
        let text = std::fs::read_to_string(&path).map_err(|source| OrchestratorError::Io {
            what: format!("cannot read prompt template {MODIX_DIR}/{rel}"),
            source,
        })?;
        render_prompt(&format!("{MODIX_DIR}/{rel}"), &text, ctx)
            .map_err(|e| OrchestratorError::Agent(e.to_string()))
    }
}

/// Writes `bytes` over the file's old content, then cuts what is left: unlike
/// truncating first, this reuses the file's blocks instead of freeing and
/// allocating them on every invocation.
fn overwrite(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    file.write_all(bytes)?;
    file.set_len(bytes.len() as u64)
}
