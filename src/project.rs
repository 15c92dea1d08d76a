//! A project loaded whole: its config, its workflows, and the references
//! between them (agents name lifecycle FSMs; workflows name agents and output
//! schemas). `modix validate`, `doctor` and `go` all start here.

use std::sync::Arc;

use crate::config::{self, Config, MODIX_DIR, ProjectPaths, source};
use crate::diagnostics::{Diagnostic, Diagnostics, unknown_name_help};
use crate::fsm::{Catalog, CompileOptions, Machine, Source, StateKind};

/// Config plus the machines it can run.
pub struct LoadedProject {
    pub config: Config,
    pub catalog: Catalog,
}

impl LoadedProject {
    pub fn catalog_len(&self) -> usize {
        self.catalog.machines().count()
    }

    /// The workflow to run: `id`, else the project's default.
    pub fn workflow(&self, id: Option<&str>) -> Result<Arc<Machine>, String> {
        let id = id.unwrap_or(&self.config.project.workflow);
        self.catalog.get(id).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.catalog.machines().map(|m| m.id()).collect();
            format!(
                "unknown workflow `{id}`; {}",
                unknown_name_help(id, "workflow", known.iter().copied())
            )
        })
    }
}

/// Loads config and FSMs and cross-checks them; `Some` only without errors.
pub fn load_checked(paths: &ProjectPaths) -> (Option<LoadedProject>, Diagnostics) {
    let opts = CompileOptions {
        default_max: config::peek_loop_bound(paths)
            .unwrap_or(CompileOptions::default().default_max),
    };
    let (catalog, fsm_diags) = Catalog::load(Some(&paths.modix_dir.join("fsm")), &opts);
    let fsm_ids: Vec<&str> = catalog.ids().collect();
    let (config, mut diags) = config::load(paths, &fsm_ids);
    diags.append(fsm_diags);
    let Some(config) = config else {
        diags.sort();
        return (None, diags);
    };
    cross_check(&config, &catalog, &mut diags);
    diags.sort();
    if diags.has_errors() {
        return (None, diags);
    }
    (Some(LoadedProject { config, catalog }), diags)
}

/// An error pointing into one of the project's JSON files.
fn at_json(paths: &ProjectPaths, file: &str, pointer: &str, message: String) -> Diagnostic {
    let display = format!("{MODIX_DIR}/{file}");
    let mut d =
        Diagnostic::error("config::unknown-reference", &display, message).with_pointer(pointer);
    if let Ok(text) = std::fs::read_to_string(paths.file(file))
        && let Some(span) = source::locate(&text, pointer, false)
    {
        d = d.with_span(&text, span);
    }
    d
}

fn cross_check(config: &Config, catalog: &Catalog, diags: &mut Diagnostics) {
    let paths = &config.paths;
    let known = || catalog.machines().map(|m| m.id()).collect::<Vec<_>>();
    let workflow = &config.project.workflow;
    if catalog.get(workflow).is_none() {
        diags.push(
            at_json(
                paths,
                "projects.json",
                "/workflow",
                format!("unknown workflow `{workflow}`"),
            )
            .with_help(unknown_name_help(workflow, "workflow", known())),
        );
    }
    // The default workflow and the project's own machines must find their agents.
    for machine in catalog.machines() {
        let own = matches!(machine.source(), Source::File(_));
        if machine.id() != workflow.as_str() && !own {
            continue;
        }
        for (_, state) in machine.states() {
            let StateKind::Agent(a) = &state.kind else {
                continue;
            };
            if a.agent == "self" {
                continue;
            }
            let problem = match config.agent_for(&a.agent) {
                Err(msg) => Some((
                    msg,
                    unknown_name_help(&a.agent, "agent", config.agents.keys().map(String::as_str)),
                )),
                Ok(agent) => match &agent.manifest.output_schema {
                    Some(s) if s != &a.output && a.output != "any" => Some((
                        format!(
                            "agent `{}` declares output `{s}` but state {} expects `{}`",
                            agent.id, state.name, a.output
                        ),
                        "make the manifest's `output_schema` match the state's `output`".to_owned(),
                    )),
                    _ => None,
                },
            };
            if let Some((msg, help)) = problem {
                diags.push(state_diagnostic(machine, &state.name, msg, help));
            }
        }
    }
}

fn state_diagnostic(machine: &Machine, state: &str, msg: String, help: String) -> Diagnostic {
    match machine.source() {
        Source::File(path) => {
            let display = path.display().to_string();
            let mut d = Diagnostic::error(
                "fsm::unknown-agent",
                &display,
                format!("state {state}: {msg}"),
            );
            if let (Ok(text), Some(span)) = (
                std::fs::read_to_string(path),
                machine
                    .state_id(state)
                    .map(|id| machine.state(id).span.clone()),
            ) {
                d = d.with_span(&text, span);
            }
            d.with_help(help)
        }
        Source::Builtin(_) => Diagnostic::error(
            "config::unknown-reference",
            format!("{MODIX_DIR}/agents.json"),
            format!(
                "workflow `{}` (built-in), state {state}: {msg}",
                machine.id()
            ),
        )
        .with_help(help),
    }
}
