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

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{self, Agent, Config, ProjectPaths, Settings, source};
use crate::diagnostics::{Diagnostic, Diagnostics, shown, unknown_name_help};
use crate::error::Error;
use crate::fsm::{Catalog, CompileOptions, Lifecycle, Machine, Role, Source, StateId, StateKind};

/// Config plus the machines it can run, resolved.
pub struct Project {
    pub config: Config,
    pub catalog: Catalog,
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
            None => {
                return Err(Error::usage(
                    format!("unknown workflow `{}`", shown(id)),
                    unknown_name_help(id, "workflow", workflows()),
                ));
            }
        };
        let mut diags = Diagnostics::new();
        let workflow = resolve_workflow(&self.config, machine, &mut diags);
        match workflow {
            Some(w) if !diags.has_errors() => Ok(w),
            _ => Err(Error::Config {
                diagnostics: Box::new(diags),
                doing: "the workflow cannot run",
            }),
        }
    }
}

/// Loads, checks and resolves the project; `Some` only without errors. The
/// diagnostics hold every problem found (warnings included) either way.
pub fn load(
    paths: &ProjectPaths,
    settings: &Settings,
    settings_diags: &Diagnostics,
) -> (Option<Project>, Diagnostics) {
    let mut diags = settings_diags.clone();
    let files = config::read(paths, &mut diags);
    let opts = CompileOptions {
        default_max: files
            .runtimes
            .as_ref()
            .map_or(CompileOptions::default().default_max, |r| {
                r.loops.default_max
            }),
    };
    let (catalog, fsm_diags) = Catalog::load(Some(&paths.modix_dir.join("fsm")), &opts);
    diags.append(fsm_diags);
    let fsm_ids: Vec<&str> = catalog.ids().collect();
    let config = config::check(paths, files, settings, &fsm_ids, &mut diags);
    let project = config.and_then(|config| resolve(config, catalog, &mut diags));
    diags.sort();
    if diags.has_errors() {
        return (None, diags);
    }
    (project, diags)
}

/// Phase 3: machines checked for their role, lifecycles and the workflows
/// the project would run resolved.
fn resolve(config: Config, catalog: Catalog, diags: &mut Diagnostics) -> Option<Project> {
    let mut lifecycles = BTreeMap::new();
    for agent in config.agents.values() {
        if lifecycles.contains_key(&agent.fsm) {
            continue;
        }
        let pointer = format!("/agents/{}/fsm", crate::schema::escape_pointer(&agent.id));
        let problem = match catalog.get(&agent.fsm) {
            None => continue, // unknown ids were reported by config::check
            Some(m) if m.role() == Role::Workflow => Err(format!(
                "agent `{}` names workflow `{}` as its lifecycle FSM; a lifecycle drives one invocation and names its agent `self`",
                agent.id, agent.fsm
            )),
            Some(m) => Lifecycle::new(Arc::clone(m)),
        };
        match problem {
            Ok(l) => {
                lifecycles.insert(agent.fsm.clone(), Arc::new(l));
            }
            Err(message) => diags.push(
                at_json(diags, "agents.json", &pointer, "fsm::role", message).with_help(
                    "name a lifecycle FSM such as `execution_fsm_v1`, or leave `fsm` out",
                ),
            ),
        }
    }
    check_default_workflow(&config, &catalog, diags);
    // The default workflow and the project's own workflows must find their
    // agents; a built-in the project does not use is resolved when asked for.
    for machine in catalog.machines() {
        let own = matches!(machine.source(), Source::File(_));
        if machine.role() == Role::Workflow && (own || machine.id() == config.project.workflow) {
            resolve_workflow(&config, Arc::clone(machine), diags);
        }
    }
    (!diags.has_errors()).then_some(Project {
        config,
        catalog,
        lifecycles,
    })
}

fn check_default_workflow(config: &Config, catalog: &Catalog, diags: &mut Diagnostics) {
    let id = &config.project.workflow;
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
/// reported against the state in the workflow's file.
fn resolve_workflow(
    config: &Config,
    machine: Arc<Machine>,
    diags: &mut Diagnostics,
) -> Option<Workflow> {
    let before = diags.error_count();
    let mut agents = Vec::with_capacity(machine.states().count());
    for (_, state) in machine.states() {
        let StateKind::Agent(a) = &state.kind else {
            agents.push(None);
            continue;
        };
        let problem = match config.agent_for(&a.agent) {
            Err(msg) => Err((
                msg,
                unknown_name_help(&a.agent, "agent", config.agents.keys().map(String::as_str)),
            )),
            Ok(agent) => match &agent.manifest.output_schema {
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
            Ok(agent) => agents.push(Some(agent)),
            Err((msg, help)) => {
                diags.push(state_diagnostic(&machine, &state.name, msg, help));
                agents.push(None);
            }
        }
    }
    (diags.error_count() == before).then_some(Workflow { machine, agents })
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

fn state_diagnostic(machine: &Machine, state: &str, msg: String, help: String) -> Diagnostic {
    match machine.source() {
        Source::File(path) => {
            let display = path.display().to_string();
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
