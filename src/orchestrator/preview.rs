//! What a run would do, without doing it (`modix go --dry-run`): each agent
//! state's process as a run would prepare it on its first visit, and the
//! prompts of the first agent state the run reaches — made by the run's own
//! code ([`super::RunInfo::call`], [`agent::prepare`],
//! [`super::RunInfo::prompt`]), so the preview cannot drift from the run.
//!
//! Nothing is recorded and nothing is started. What preparing writes (a
//! prompt file for shells that read one, the private TMPDIR) goes to a
//! temporary folder, removed at the end; its path is shown as `<run-dir>`
//! (a run's `.modix/runs/<run id>/`), the workspace's as `<workspace>`.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::context::ContextPackage;
use super::inputs::Inputs;
use super::{RunError, RunFiles, RunInfo, agent};
use crate::config::{Agent, Binding, PromptMode};
use crate::fsm::{StateId, StateKind};
use crate::project::{Project, Workflow};
use crate::store::{Run, RunStatus};

/// What stands for the run's id in a preview (no run exists).
pub const PREVIEW_RUN_ID: &str = "<run-id>";
/// What stands for the run's folder (`.modix/runs/<run id>/`) in a preview.
pub const RUN_DIR: &str = "<run-dir>";
/// What stands for the run's workspace (its worktree or copy) in a preview.
pub const WORKSPACE: &str = "<workspace>";
/// What stands for a prompt in a command line (shown on its own).
pub const PROMPT: &str = "<prompt>";
/// What stands for a system prompt in a command line (shown on its own).
pub const SYSTEM_PROMPT: &str = "<system prompt>";

/// A run's plan, before it is made.
#[derive(Debug, Serialize, Deserialize)]
pub struct Preview {
    /// The epic, redacted as a run records it.
    pub epic: String,
    pub workflow: String,
    pub workflow_version: String,
    /// Every agent state, in the workflow file's order.
    pub states: Vec<StatePreview>,
    /// The first agent state the run reaches (after its input states), with
    /// its prompts as they would be sent; `None` when a gate or the end
    /// comes first.
    pub first: Option<FirstPrompts>,
}

/// One agent state's process, as its first visit would start it.
#[derive(Debug, Serialize, Deserialize)]
pub struct StatePreview {
    pub state: String,
    pub agent: String,
    pub role: String,
    pub binding: BindingPreview,
    /// Program first, secrets redacted, prompts as `<prompt>`.
    pub argv: Vec<String>,
    /// Why it could not be started (its program not found, …), if so.
    pub error: Option<String>,
    /// How it gets its prompt: `stdin`, `argument` or `file`.
    pub prompt_via: PromptMode,
    /// The names of the variables it gets (never their values).
    pub env: Vec<String>,
    pub timeout_secs: u64,
    /// The most times a run can enter the state.
    pub worst_case_visits: Option<u64>,
}

/// How an agent is bound.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BindingPreview {
    Shell {
        shell: String,
        brain: String,
        provider: String,
        model: String,
    },
    Command {
        argv: Vec<String>,
    },
}

/// The prompts of the first agent state, redacted as a run records them.
#[derive(Debug, Serialize, Deserialize)]
pub struct FirstPrompts {
    pub state: String,
    pub agent: String,
    pub prompt: String,
    pub system_prompt: Option<String>,
}

/// Previews a run of `epic` on `workflow`.
pub fn preview(project: &Project, workflow: Workflow, epic: &str) -> Result<Preview, RunError> {
    let tmp = tempfile::Builder::new()
        .prefix("modix-dry-run-")
        .tempdir()
        .map_err(|e| RunError::io("cannot make a temporary folder", e))?;
    let dir = tmp.path().join("run");
    std::fs::create_dir(&dir)
        .map_err(|e| RunError::io(format!("cannot create {}", dir.display()), e))?;
    let workdir = tmp.path().join("workspace");
    let machine = std::sync::Arc::clone(&workflow.machine);
    let (first, history) = first_agent_state(&machine, epic);
    let info = preview_info(project, workflow, epic, &dir, &workdir);
    let shown = |s: &str| {
        s.replace(&dir.display().to_string(), RUN_DIR)
            .replace(&workdir.display().to_string(), WORKSPACE)
    };
    let mut preview = Preview {
        epic: info.redactor().redact(epic).into_owned(),
        workflow: machine.id().to_owned(),
        workflow_version: machine.version().to_string(),
        states: Vec::new(),
        first: None,
    };
    for (id, state) in machine.states() {
        let (StateKind::Agent(spec), Some(agent)) = (&state.kind, info.workflow.agent(id)) else {
            continue;
        };
        let seen = Seen {
            info: &info,
            history: &history,
            shown: &shown,
        };
        let (state, prompts) = seen.state(id, spec, agent, Some(id) == first)?;
        preview.states.push(state);
        if prompts.is_some() {
            preview.first = prompts;
        }
    }
    redacted(info.redactor(), preview)
}

/// The preview with every text in it redacted, in one place: a secret
/// reaches it through whatever field it was given in (a `--model` given a
/// key by mistake, a brain's name), and both its views print from this.
fn redacted(redactor: &crate::shell::Redactor, preview: Preview) -> Result<Preview, RunError> {
    let value = serde_json::to_value(&preview)
        .map_err(|e| RunError::Internal(format!("the preview as JSON: {e}")))?;
    match redactor.redact_json(&value) {
        std::borrow::Cow::Borrowed(_) => Ok(preview),
        std::borrow::Cow::Owned(clean) => serde_json::from_value(clean)
            .map_err(|e| RunError::Internal(format!("the redacted preview: {e}"))),
    }
}

/// A run as the preview pretends it is: nothing recorded, its folders in a
/// temporary one.
fn preview_info<'p>(
    project: &'p Project,
    workflow: Workflow,
    epic: &str,
    dir: &std::path::Path,
    workdir: &std::path::Path,
) -> RunInfo<'p> {
    let machine = std::sync::Arc::clone(&workflow.machine);
    let now = crate::store::now();
    RunInfo {
        project,
        texts: super::context::StoredTexts::new(agent::redactor(&project.config)),
        workflow,
        run: Run {
            id: PREVIEW_RUN_ID.to_owned(),
            epic: epic.to_owned(),
            workflow_id: machine.id().to_owned(),
            workflow_version: machine.version().to_string(),
            workflow_hash: machine.content_hash().to_owned(),
            status: RunStatus::Running,
            status_reason: None,
            current_state: machine.state(machine.initial()).name.clone(),
            workdir: workdir.display().to_string(),
            created_at: now.clone(),
            updated_at: now,
            ended_at: None,
            owner_pid: None,
            heartbeat_at: None,
            workspace: None,
            forked_from: None,
            overrides: None,
        },
        workdir: workdir.to_path_buf(),
        files: RunFiles {
            dir: dir.to_path_buf(),
        },
        stream: false,
        rules: Default::default(),
        programs: Default::default(),
        tmp_seen: Default::default(),
        inherited: agent::inherited(&project.config.runtimes),
    }
}

/// What one agent state of the previewed run is seen to do.
struct Seen<'a, 'p> {
    info: &'a RunInfo<'p>,
    /// What a `shared` agent is handed by the first agent state.
    history: &'a [Value],
    /// A text with the temporary folders named as placeholders.
    shown: &'a dyn Fn(&str) -> String,
}

impl Seen<'_, '_> {
    /// The state's binding, argv and environment; with its prompts when it is
    /// the `first` agent state (a later state's depend on what earlier
    /// agents answer).
    fn state(
        &self,
        id: StateId,
        spec: &crate::fsm::AgentState,
        agent: &crate::config::Agent,
        first: bool,
    ) -> Result<(StatePreview, Option<FirstPrompts>), RunError> {
        let (info, project, shown) = (self.info, self.info.project, self.shown);
        let machine = &info.workflow.machine;
        let inputs = self.inputs(agent);
        let call = info.call(id, spec, agent, 1, &inputs);
        let (prompt, system_prompt) = if first {
            let ctx = ContextPackage::new(&call, &project.config.project, &inputs);
            let prompt = info.prompt(agent, &ctx)?;
            let system = match &agent.manifest.system_prompt {
                Some(rel) => Some(info.render_template(rel, &ctx)?),
                None => None,
            };
            (prompt, system)
        } else {
            let system = agent.manifest.system_prompt.as_ref();
            (PROMPT.to_owned(), system.map(|_| SYSTEM_PROMPT.to_owned()))
        };
        let setup = agent::Setup {
            root: &project.config.paths.root,
            inherited: &info.inherited,
            programs: &info.programs,
            tmp_seen: &info.tmp_seen,
            runtimes: &project.config.runtimes,
            commands: &project.config.project.commands,
        };
        let prepared = agent::prepare(
            &call,
            &setup,
            &prompt,
            system_prompt.as_deref(),
            info.redactor(),
        );
        let redacted_prompt = info.redactor().redact(&prompt).into_owned();
        let redacted_system = system_prompt
            .as_deref()
            .map(|s| info.redactor().redact(s).into_owned());
        // The prompts are shown on their own, not inside the command line.
        let in_argv = |arg: &str| {
            let mut arg = arg.to_owned();
            if !redacted_prompt.is_empty() && redacted_prompt != PROMPT {
                arg = arg.replace(&redacted_prompt, PROMPT);
            }
            if let Some(s) = redacted_system.as_deref().filter(|s| !s.is_empty()) {
                arg = arg.replace(s, SYSTEM_PROMPT);
            }
            shown(&arg)
        };
        let (argv, error, env, timeout) = match &prepared {
            Ok(p) => (
                p.argv_redacted.iter().map(|a| in_argv(a)).collect(),
                None,
                env_names(&p.spec.env),
                p.spec.timeout,
            ),
            Err(e) => (
                e.argv().iter().map(|a| in_argv(a)).collect(),
                Some(shown(&e.to_string())),
                Vec::new(),
                call.timeout,
            ),
        };
        let name = machine.state(id).name.clone();
        let prompts = first.then(|| FirstPrompts {
            state: name.clone(),
            agent: agent.id.clone(),
            prompt: shown(&redacted_prompt),
            system_prompt: redacted_system.as_deref().map(shown),
        });
        let state = StatePreview {
            state: name,
            agent: agent.id.clone(),
            role: agent.role.clone(),
            binding: binding(agent),
            argv,
            error,
            prompt_via: match &agent.binding {
                Binding::Shell { shell, .. } => shell.prompt,
                Binding::Command { .. } => PromptMode::Stdin,
            },
            env,
            timeout_secs: timeout.as_secs(),
            worst_case_visits: machine.bound_for_visits(id),
        };
        Ok((state, prompts))
    }

    /// What the state would be handed on its first visit: nothing from
    /// earlier agents, the run's messages when it shares them.
    fn inputs(&self, agent: &crate::config::Agent) -> Inputs {
        let context_mode = context_mode(self.info.project, agent);
        let history = match context_mode {
            crate::config::ContextMode::Shared => Some(self.history.to_vec()),
            crate::config::ContextMode::Isolated => None,
        };
        Inputs {
            task_spec: None,
            previous_result: None,
            task_spec_blob: None,
            previous_result_blob: None,
            feedback: None,
            outputs: Default::default(),
            came_from: None,
            next_task: None,
            notes: Vec::new(),
            pending: Vec::new(),
            pending_ids: Vec::new(),
            context_mode,
            history,
            // A preview records nothing.
            history_blobs: Vec::new(),
        }
    }
}

/// The first agent state a run reaches from the initial state through its
/// input states, and the messages the run holds by then (what a `shared`
/// agent is handed as `history`).
fn first_agent_state(machine: &crate::fsm::Machine, epic: &str) -> (Option<StateId>, Vec<Value>) {
    let mut pos = machine.start();
    let mut history = Vec::new();
    // Input states only come first; the bound keeps a broken machine finite.
    for seq in 1..=machine.states().count() {
        let state = machine.state(pos.state());
        match &state.kind {
            StateKind::Agent(_) => return (Some(pos.state()), history),
            StateKind::Input { event } => {
                history.push(json!({
                    "seq": seq, "kind": "epic", "state": state.name, "payload": { "epic": epic },
                }));
                match machine.fire(&pos, event) {
                    Ok(fired) => pos = fired.position,
                    Err(_) => break,
                }
            }
            StateKind::Human { .. } | StateKind::Terminal { .. } => break,
        }
    }
    (None, history)
}

/// The manifest's context mode, else the global default (as a run decides).
fn context_mode(project: &Project, agent: &Agent) -> crate::config::ContextMode {
    agent
        .manifest
        .context
        .or(project.config.settings.context_mode)
        .unwrap_or_default()
}

fn binding(agent: &Agent) -> BindingPreview {
    match &agent.binding {
        Binding::Shell { shell, brain } => BindingPreview::Shell {
            shell: shell.name.clone(),
            brain: brain.name.clone(),
            provider: brain.provider.clone(),
            model: brain.model.clone(),
        },
        Binding::Command { argv } => BindingPreview::Command { argv: argv.clone() },
    }
}

/// The names of an environment, sorted, each once.
fn env_names(env: &[(std::ffi::OsString, std::ffi::OsString)]) -> Vec<String> {
    let mut names: Vec<String> = env
        .iter()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.dedup();
    names
}
