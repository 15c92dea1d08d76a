//! A project loaded whole and resolved: its config, its machines, and
//! everything a run needs looked up once — each agent's shell, brain and
//! checked lifecycle, each workflow state's agent — so that a run cannot
//! fail on configuration once it has started. `validate`, `doctor` and `go`
//! all load through [`load`], so what `validate` passes, `go` can run.
//!
//! Loading happens in phases: the config files are read and schema-checked
//! (`config::read`), the FSMs compile with the project's loop bound from
//! `runtimes.json`, the references between files are checked against the
//! compiled FSM ids (`config::check`), and finally machines are checked for
//! the role they are used in (workflow or lifecycle) and resolved here.
//! Every phase runs whatever failed before it, on what could be read, so
//! one pass reports every independent problem; only the project itself
//! needs every phase clean.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{
    self, Agent, AgentIndex, AgentLookup, Binding, Checked, Config, ProjectPaths, Settings, source,
};
use crate::diagnostics::{Diagnostic, Diagnostics, Severity, shown, unknown_name_help};
use crate::error::Error;
use crate::fsm::{Catalog, CompileOptions, Lifecycle, Machine, Role, Source, StateId, StateKind};
use crate::schema::Schemas;

/// Config plus the machines it can run, resolved.
pub struct Project {
    pub config: Config,
    pub catalog: Catalog,
    /// The output schemas its agents answer to, the project's own
    /// (`.modix/schemas/`) included: what a run validates outputs with
    /// (`schemas.validate(id, &output)`) and hands agents (`schemas.text(id)`).
    #[allow(dead_code)] // The orchestrator's to use (not wired yet).
    pub schemas: Schemas,
    /// Every lifecycle FSM an agent names, by id, checked.
    lifecycles: BTreeMap<String, Arc<Lifecycle>>,
}

/// A workflow ready to run: its machine and, for each agent state, the agent
/// that state invokes.
pub struct Workflow {
    pub machine: Arc<Machine>,
    /// By state index; `None` for input and terminal states.
    agents: Vec<Option<Agent>>,
}

impl Workflow {
    /// The agent an agent state invokes.
    pub fn agent(&self, state: StateId) -> Option<&Agent> {
        self.agents.get(state.index()).and_then(Option::as_ref)
    }
}

impl Project {
    pub fn catalog_len(&self) -> usize {
        self.catalog.machines().count()
    }

    /// The checked lifecycle of an agent (resolved when the project loaded).
    pub fn lifecycle(&self, agent: &Agent) -> &Arc<Lifecycle> {
        // `load` resolved the lifecycle of every agent or failed.
        &self.lifecycles[&agent.fsm]
    }

    /// The workflow to run: `id`, else the project's default, with every
    /// agent state's agent resolved. Only workflows are offered: a lifecycle
    /// FSM cannot be run as a workflow.
    pub fn workflow(&self, id: Option<&str>) -> Result<Workflow, Error> {
        let id = id.unwrap_or(&self.config.project.workflow);
        let workflows = || workflow_ids(&self.catalog);
        let machine = match self.catalog.get(id) {
            Some(m) if m.role() == Role::Workflow => Arc::clone(m),
            Some(_) => {
                return Err(Error::usage(
                    format!(
                        "`{id}` is a lifecycle FSM (it drives one agent invocation), not a workflow"
                    ),
                    unknown_name_help(id, "workflow", workflows()),
                ));
            }
            // Its file has errors: those, not "unknown workflow".
            None if let Some(entry) = self.catalog.entry(id) => {
                return Err(Error::Config {
                    diagnostics: Box::new(entry.diagnostics.clone()),
                    doing: "the workflow cannot run",
                });
            }
            None => {
                return Err(Error::usage(
                    format!("unknown workflow `{}`", shown(id)),
                    unknown_name_help(id, "workflow", workflows()),
                ));
            }
        };
        let mut diags = Diagnostics::new();
        let (no_broken, agents) = (BTreeMap::new(), &self.config.agents);
        let index = AgentIndex {
            agents,
            broken: &no_broken,
            known: true,
        };
        let workflow = resolve_workflow(&index, &self.catalog, machine, &mut diags);
        match workflow {
            Some(w) if !diags.has_errors() => Ok(w),
            _ => Err(Error::Config {
                diagnostics: Box::new(diags),
                doing: "the workflow cannot run",
            }),
        }
    }
}

/// What `go` changes for one run, on the command line: `--brain
/// AGENT=BRAIN`, `--model AGENT=MODEL` and `--env NAME`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Overrides {
    /// (agent, brain): bind the agent's shell to another brain of brains.json.
    pub brains: Vec<(String, String)>,
    /// (agent, model): the same brain with another model.
    pub models: Vec<(String, String)>,
    /// Variables of the user's environment every agent gets too.
    pub env: Vec<String>,
}

impl Overrides {
    pub fn is_empty(&self) -> bool {
        self.brains.is_empty() && self.models.is_empty() && self.env.is_empty()
    }
}

impl Project {
    /// This project as one run sees it: `overrides` applied to its agents
    /// and its environment allowlist, so the run (and its record: each
    /// invocation's argv and context name the brain and model) is made from
    /// them like from the files. Brains are changed before models; a brain
    /// must provide what the agent's manifest requires, as `validate` checks
    /// for the files. Returns the project and what the user should be told
    /// (an override that does nothing for the workflow `workflow`).
    pub fn with_overrides(
        mut self,
        overrides: &Overrides,
        workflow: Option<&str>,
    ) -> Result<(Project, Vec<String>), Error> {
        let mut notes = Vec::new();
        for (id, name) in &overrides.brains {
            let brain = match self.config.brains.get(name) {
                Some(b) => b.clone(),
                None => {
                    return Err(Error::usage(
                        format!("--brain {id}={name}: unknown brain `{}`", shown(name)),
                        unknown_name_help(
                            name,
                            "brain",
                            self.config.brains.keys().map(String::as_str),
                        ),
                    ));
                }
            };
            let agent = self.agent_to_change(id, "--brain", name)?;
            let Binding::Shell {
                shell,
                brain: bound,
            } = &mut agent.binding
            else {
                unreachable!("agent_to_change returns shell agents only")
            };
            let missing: Vec<String> = agent
                .manifest
                .requires
                .iter()
                .filter(|c| !shell.capabilities.contains(c) && !brain.capabilities.contains(c))
                .map(|c| format!("`{c}`"))
                .collect();
            if !missing.is_empty() {
                return Err(Error::usage(
                    format!(
                        "--brain {id}={name}: agent `{id}` requires {} but shell `{}` and brain `{name}` do not provide it",
                        missing.join(", "),
                        shell.name
                    ),
                    "pick a brain that lists the capability in brains.json",
                ));
            }
            **bound = brain;
        }
        for (id, model) in &overrides.models {
            let agent = self.agent_to_change(id, "--model", model)?;
            if let Binding::Shell { brain, .. } = &mut agent.binding {
                brain.model = model.clone();
            }
        }
        let allow = &mut self.config.runtimes.env.allow;
        for name in &overrides.env {
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
                && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric());
            if !valid {
                return Err(Error::usage(
                    format!("--env {}: not a variable name", shown(name)),
                    "name one variable of your environment, e.g. --env BOT_DELAY",
                ));
            }
            if !allow.contains(name) {
                allow.push(name.clone());
            }
            if std::env::var_os(name).is_none() {
                notes.push(format!(
                    "--env {name}: {name} is not set in your environment, so no agent gets it"
                ));
            }
        }
        if let Ok(w) = self.workflow(workflow) {
            let used: Vec<&str> = w.agents.iter().flatten().map(|a| a.id.as_str()).collect();
            let named = overrides.brains.iter().chain(&overrides.models);
            let mut unused: Vec<&str> = named
                .map(|(id, _)| id.as_str())
                .filter(|id| !used.contains(id))
                .collect();
            unused.dedup();
            for id in unused {
                notes.push(format!(
                    "agent `{id}` takes no part in workflow `{}`: its override changes nothing",
                    w.machine.id()
                ));
            }
        }
        Ok((self, notes))
    }

    /// The shell agent `id`, whose binding `flag` changes (to `value`).
    fn agent_to_change(&mut self, id: &str, flag: &str, value: &str) -> Result<&mut Agent, Error> {
        let known: Vec<String> = self.config.agents.keys().cloned().collect();
        let Some(agent) = self.config.agents.get_mut(id) else {
            return Err(Error::usage(
                format!("{flag} {id}={value}: unknown agent `{}`", shown(id)),
                unknown_name_help(id, "agent", known.iter().map(String::as_str)),
            ));
        };
        if let Binding::Command { argv } = &agent.binding {
            return Err(Error::usage(
                format!(
                    "{flag} {id}={value}: agent `{id}` runs a command (`{}`), which has no brain",
                    argv.join(" ")
                ),
                "brains and models belong to agents bound to a shell; change the command in agents.json",
            ));
        }
        Ok(agent)
    }
}

/// What a project is loaded for. The checks are the same either way (one
/// code path: what `validate` passes, `go` can run); only the severity of
/// problems in FSM files the run does not use differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose<'a> {
    /// `validate` and `doctor`: every problem is an error.
    Check,
    /// `go`: problems in a project FSM file that is neither the workflow
    /// run (`None`: the project's default) nor an agent's lifecycle are
    /// warnings: the run does not touch it.
    Run { workflow: Option<&'a str> },
}

/// Loads, checks and resolves the project for `validate`; `Some` only
/// without errors. The diagnostics hold every problem found (warnings
/// included) either way.
pub fn load(
    paths: &ProjectPaths,
    settings: &Settings,
    settings_diags: &Diagnostics,
) -> (Option<Project>, Diagnostics) {
    load_for(paths, settings, settings_diags, Purpose::Check)
}

/// [`load`] for a purpose.
pub fn load_for(
    paths: &ProjectPaths,
    settings: &Settings,
    settings_diags: &Diagnostics,
    purpose: Purpose,
) -> (Option<Project>, Diagnostics) {
    let mut diags = settings_diags.clone();
    let files = config::read(paths, &mut diags);
    // Before the FSMs: their emit rules are checked against these.
    let schemas = Schemas::load(paths, &mut diags);
    let opts = CompileOptions {
        default_max: files
            .runtimes
            .as_ref()
            .map_or(CompileOptions::default().default_max, |r| {
                r.loops.default_max
            }),
        schemas: &schemas,
    };
    let (catalog, fsm_diags) = Catalog::load(Some(&paths.modix_dir.join("fsm")), &opts);
    let fsm_ids: Vec<&str> = catalog.ids().collect();
    // The config's own errors decide whether there is a config; the FSM
    // files' problems join after, and do not stop the checks below.
    let checked = config::check(paths, files, settings, &fsm_ids, &schemas, &mut diags);
    diags.append(fsm_diags);
    let lifecycles = resolve(&checked, &catalog, &mut diags);
    if let Purpose::Run { workflow } = purpose {
        diags = spare_unused(&checked, &catalog, workflow, diags);
    }
    diags.sort();
    if diags.has_errors() {
        return (None, diags);
    }
    let project = checked.into_config().map(|config| Project {
        config,
        catalog,
        schemas,
        lifecycles,
    });
    (project, diags)
}

/// Phase 3: machines checked for the role they are used in, lifecycles and
/// the workflows the project would run resolved, as far as the config
/// could be read. Returns the lifecycles of the agents.
fn resolve(
    checked: &Checked,
    catalog: &Catalog,
    diags: &mut Diagnostics,
) -> BTreeMap<String, Arc<Lifecycle>> {
    let mut lifecycles = BTreeMap::new();
    let mut judged = std::collections::BTreeSet::new();
    for (agent, fsm) in &checked.lifecycles {
        if !judged.insert(fsm.as_str()) {
            continue;
        }
        let pointer = format!("/agents/{}/fsm", crate::schema::escape_pointer(agent));
        let problem = match catalog.get(fsm) {
            // Unknown ids were reported by config::check, broken files by the catalog.
            None => continue,
            Some(m) if m.role() == Role::Workflow => Err(format!(
                "agent `{agent}` names workflow `{fsm}` as its lifecycle FSM; a lifecycle drives one invocation and names its agent `self`"
            )),
            Some(m) => Lifecycle::new(Arc::clone(m)),
        };
        match problem {
            Ok(l) => {
                lifecycles.insert(fsm.clone(), Arc::new(l));
            }
            Err(message) => diags.push(
                at_json(diags, "agents.json", &pointer, "fsm::role", message).with_help(
                    "name a lifecycle FSM such as `execution_fsm_v1`, or leave `fsm` out",
                ),
            ),
        }
    }
    let default = checked.project.as_ref().map(|p| p.workflow.as_str());
    if let Some(id) = default {
        check_default_workflow(id, catalog, diags);
    }
    // The default workflow and the project's own workflows must find their
    // agents; a built-in the project does not use is resolved when asked for.
    let index = checked.agent_index();
    for machine in catalog.machines() {
        let own = matches!(machine.source(), Source::File(_));
        if machine.role() == Role::Workflow && (own || Some(machine.id()) == default) {
            resolve_workflow(&index, catalog, Arc::clone(machine), diags);
        }
    }
    lifecycles
}

/// For a run: problems in project FSM files the run does not use become
/// warnings (it uses the workflow `workflow`, else the default, and the
/// agents' lifecycles).
fn spare_unused(
    checked: &Checked,
    catalog: &Catalog,
    workflow: Option<&str>,
    diags: Diagnostics,
) -> Diagnostics {
    let run = workflow.or(checked.project.as_ref().map(|p| p.workflow.as_str()));
    // A file whose id cannot be read may be the run's own workflow (an
    // override gone wrong): its problems stay errors.
    let used = |id: &Option<String>| match id.as_deref() {
        None => true,
        Some(id) => Some(id) == run || checked.lifecycles.values().any(|l| l == id),
    };
    let unused: Vec<&str> = catalog
        .entries()
        .iter()
        .filter(|e| !e.is_builtin() && !used(&e.id))
        .map(|e| e.display.as_str())
        .collect();
    let mut out = Diagnostics::new();
    for d in diags.items() {
        let mut d = d.clone();
        if unused.contains(&d.file.as_str()) && d.severity == Severity::Error {
            d.severity = Severity::Warning;
            d.message = format!("in a file this run does not use: {}", d.message);
        }
        if let Some(text) = diags.source(&d.file) {
            out.add_source(d.file.clone(), text);
        }
        out.push(d);
    }
    out
}

fn check_default_workflow(id: &str, catalog: &Catalog, diags: &mut Diagnostics) {
    let message = match catalog.get(id) {
        Some(m) if m.role() == Role::Lifecycle => {
            format!(
                "workflow `{id}` is a lifecycle FSM (it drives one agent invocation), not a workflow"
            )
        }
        Some(_) => return,
        // A file with this id exists but has errors: those are reported.
        None if catalog.entry(id).is_some() => return,
        None => format!("unknown workflow `{id}`"),
    };
    let help = unknown_name_help(id, "workflow", workflow_ids(catalog));
    diags.push(
        at_json(
            diags,
            "projects.json",
            "/workflow",
            "config::unknown-reference",
            message,
        )
        .with_help(help),
    );
}

/// Ids of the machines that can run as workflows (not lifecycles).
fn workflow_ids(catalog: &Catalog) -> Vec<&str> {
    catalog
        .machines()
        .filter(|m| m.role() == Role::Workflow)
        .map(|m| m.id())
        .collect()
}

/// The workflow with each agent state's agent looked up; problems are
/// reported against the state in the workflow's file. An agent with errors
/// of its own is skipped (they are reported where it is defined).
fn resolve_workflow(
    agents: &AgentIndex,
    catalog: &Catalog,
    machine: Arc<Machine>,
    diags: &mut Diagnostics,
) -> Option<Workflow> {
    let before = diags.error_count();
    let mut resolved = Vec::with_capacity(machine.states().count());
    for (_, state) in machine.states() {
        let StateKind::Agent(a) = &state.kind else {
            resolved.push(None);
            continue;
        };
        let problem = match agents.lookup(&a.agent) {
            AgentLookup::Broken => {
                resolved.push(None);
                continue;
            }
            AgentLookup::Problem(msg) => Err((
                msg,
                unknown_name_help(&a.agent, "agent", agents.agents.keys().map(String::as_str)),
            )),
            AgentLookup::Found(agent) => match &agent.manifest.output_schema {
                Some(s) if s != &a.output && a.output != "any" => Err((
                    format!(
                        "agent `{}` declares output `{s}` but state {} expects `{}`",
                        agent.id, state.name, a.output
                    ),
                    "make the manifest's `output_schema` match the state's `output`".to_owned(),
                )),
                _ => Ok(agent.clone()),
            },
        };
        match problem {
            Ok(agent) => resolved.push(Some(agent)),
            Err((msg, help)) => {
                diags.push(state_diagnostic(catalog, &machine, &state.name, msg, help));
                resolved.push(None);
            }
        }
    }
    (diags.error_count() == before).then_some(Workflow {
        machine,
        agents: resolved,
    })
}

/// An error pointing into one of the project's JSON files, with a snippet
/// when the file's text was read during this load.
fn at_json(
    diags: &Diagnostics,
    file: &str,
    pointer: &str,
    code: &str,
    message: String,
) -> Diagnostic {
    let display = config::discover::shown(file);
    let mut d = Diagnostic::error(code, &display, message).with_pointer(pointer);
    if let Some(text) = diags.source(&display)
        && let Some(span) = source::locate(&text, pointer, false)
    {
        d = d.with_span(&text, span);
    }
    d
}

fn state_diagnostic(
    catalog: &Catalog,
    machine: &Machine,
    state: &str,
    msg: String,
    help: String,
) -> Diagnostic {
    match machine.source() {
        Source::File(path) => {
            // Named as the catalog names the file, so it matches its other diagnostics.
            let display = catalog
                .entry(machine.id())
                .map_or_else(|| path.display().to_string(), |e| e.display.clone());
            let d = Diagnostic::error(
                "fsm::unknown-agent",
                &display,
                format!("state {state}: {msg}"),
            );
            let span = machine
                .state_id(state)
                .map(|id| machine.state(id).span.clone());
            match span {
                Some(span) => d.with_span(machine.text(), span),
                None => d,
            }
            .with_help(help)
        }
        Source::Builtin(_) => Diagnostic::error(
            "config::unknown-reference",
            config::discover::shown("agents.json"),
            format!(
                "workflow `{}` (built-in), state {state}: {msg}",
                machine.id()
            ),
        )
        .with_help(help),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh `modix init` project with a broken workflow file of its own.
    fn project_with_broken_review() -> (tempfile::TempDir, ProjectPaths) {
        let tmp = tempfile::tempdir().unwrap();
        let paths = ProjectPaths::at(tmp.path());
        let binding = crate::scaffold::Binding {
            shell: "claude".into(),
            brain: "anthropic".into(),
            custom: false,
            found_at: None,
            detected: Vec::new(),
            tests: Default::default(),
        };
        for (name, bytes) in crate::scaffold::render(tmp.path(), &binding, &Default::default()) {
            let path = paths.file(&name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
        let review =
            "id = \"review\"\nversion = \"1.0.0\"\ninitial = \"S\"\n[states.S]\nkind = \"inptu\"\n";
        std::fs::write(paths.file("fsm/review.toml"), review).unwrap();
        (tmp, paths)
    }

    #[test]
    fn a_run_is_spared_the_broken_files_it_does_not_use() {
        let (_tmp, paths) = project_with_broken_review();
        let settings = Settings::default();
        let none = Diagnostics::new();
        let (project, diags) = load(&paths, &settings, &none);
        assert!(project.is_none() && diags.has_errors(), "validate refuses");

        let run = Purpose::Run { workflow: None };
        let (project, diags) = load_for(&paths, &settings, &none, run);
        let text = diags.render_human(false);
        assert!(project.is_some(), "{text}");
        assert!(!diags.has_errors() && diags.warning_count() > 0, "{text}");
        assert!(text.contains("in a file this run does not use: "), "{text}");

        let run = Purpose::Run {
            workflow: Some("review"),
        };
        let (project, diags) = load_for(&paths, &settings, &none, run);
        assert!(project.is_none() && diags.has_errors(), "the run uses it");
    }
}
