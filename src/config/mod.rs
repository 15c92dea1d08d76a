//! Loading and checking `.modix/`: the config files, their JSON Schemas, the
//! references between them, and the layering of settings. [`load`] reads every
//! file and reports every problem at once; a [`Config`] exists only when there
//! were no errors.

mod check;
pub mod discover;
pub mod presets;
pub mod settings;
pub mod source;
pub mod types;

use std::collections::BTreeMap;

pub use discover::{MODIX_DIR, ProjectPaths, find_project};
pub use types::*;

use crate::diagnostics::Diagnostics;

/// The config format this binary reads and writes.
pub const FORMAT_VERSION: semver::Version = semver::Version::new(1, 0, 0);

/// A project's whole configuration, checked.
#[derive(Debug, Clone)]
pub struct Config {
    pub paths: ProjectPaths,
    pub shells: BTreeMap<String, Shell>,
    pub brains: BTreeMap<String, Brain>,
    pub agents: BTreeMap<String, Agent>,
    pub runtimes: Runtimes,
    pub project: Project,
    pub settings: Settings,
}

impl Config {
    /// The agent a workflow state names: an agent id first, else the one agent with that role.
    pub fn agent_for(&self, id_or_role: &str) -> Result<&Agent, String> {
        if let Some(a) = self.agents.get(id_or_role) {
            return Ok(a);
        }
        let by_role: Vec<&Agent> = self
            .agents
            .values()
            .filter(|a| a.role == id_or_role)
            .collect();
        match by_role.as_slice() {
            [one] => Ok(one),
            [] => Err(format!("no agent has id or role `{id_or_role}`")),
            many => Err(format!(
                "role `{id_or_role}` is taken by several agents ({}); name one by id in the FSM",
                many.iter()
                    .map(|a| a.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
}

/// The config files as read and schema-checked, before references between
/// them are checked: phase 1 of loading a project. `runtimes` is needed
/// before the FSMs compile (their default loop bound), and the reference
/// checks of phase 2 ([`check`]) need the compiled FSMs' ids.
pub struct Files {
    /// The config format, checked (`None` when unreadable or unsupported).
    format: Option<semver::Version>,
    shells: Option<(source::SourceFile, ShellsFile)>,
    brains: Option<(source::SourceFile, BrainsFile)>,
    agents: Option<(source::SourceFile, AgentsFile)>,
    pub runtimes: Option<Runtimes>,
    project: Option<Project>,
}

/// Reads and schema-checks `runtimes.json` alone, for commands that need only
/// the loop bound (`modix fsm …`).
pub fn read_runtimes(paths: &ProjectPaths, diags: &mut Diagnostics) -> Option<Runtimes> {
    parsed(paths, "runtimes.json", "runtimes", diags).map(|(_, r)| r)
}

/// Reads and schema-checks every config file of the project, reporting
/// every problem; a file with errors is `None` in the result.
pub fn read(paths: &ProjectPaths, diags: &mut Diagnostics) -> Files {
    let format = parsed(paths, "version.json", "version", diags)
        .and_then(|(f, v): (_, VersionFile)| check::format_version(&v, &f, diags));
    let shells = parsed(paths, "shells.json", "shells", diags);
    let brains = parsed(paths, "brains.json", "brains", diags);
    let agents = parsed(paths, "agents.json", "agents", diags);
    let runtimes = parsed(paths, "runtimes.json", "runtimes", diags).map(|(_, r)| r);
    let project = parsed(paths, "projects.json", "projects", diags).map(|(_, p)| p);
    // Run state, not config: written by the engine and usually git-ignored,
    // so a fresh clone may not have it. Checked when present.
    if std::fs::symlink_metadata(paths.file("state.json")).is_ok()
        && let Some(f) = source::read(&paths.file("state.json"), &paths.shown("state.json"), diags)
        && let Some(v) = source::parse_json(&f, diags)
    {
        source::check_schema(&f, "state", &v, diags);
    }
    Files {
        format,
        shells,
        brains,
        agents,
        runtimes,
        project,
    }
}

/// One file of `.modix/`, read, schema-checked and typed.
fn parsed<T: serde::de::DeserializeOwned>(
    paths: &ProjectPaths,
    name: &str,
    schema: &str,
    diags: &mut Diagnostics,
) -> Option<(source::SourceFile, T)> {
    let file = source::read(&paths.file(name), &paths.shown(name), diags)?;
    let value = source::parse(&file, schema, diags)?;
    Some((file, value))
}

/// Phase 2: checks the references between the files (agents name shells,
/// brains and lifecycle FSMs — `fsm_ids`) and settles every agent's binding.
/// Returns the config when there were no errors at all.
pub fn check(
    paths: &ProjectPaths,
    files: Files,
    settings: &Settings,
    fsm_ids: &[&str],
    diags: &mut Diagnostics,
) -> Option<Config> {
    let shells = files
        .shells
        .as_ref()
        .map(|(src, f)| check::shells(f, src, diags));
    let brains = files
        .brains
        .map(|(src, f)| check::brains(f, Some(&src), diags));
    // References need the files they point into; skip them when those failed.
    let agents = match (&files.agents, &shells, &brains) {
        (Some((src, raw)), Some(shells), Some(brains)) => Some(check::agents(
            raw,
            src,
            check::Known {
                paths,
                shells,
                brains,
                fsm_ids,
                settings,
            },
            diags,
        )),
        _ => None,
    };
    if diags.has_errors() || files.format.is_none() {
        return None;
    }
    Some(Config {
        paths: paths.clone(),
        shells: shells?,
        brains: brains?,
        agents: agents?,
        runtimes: files.runtimes?,
        project: files.project?,
        settings: settings.clone(),
    })
}
