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

use crate::diagnostics::{Diagnostic, Diagnostics};

/// The config format this binary reads and writes.
pub const FORMAT_VERSION: semver::Version = semver::Version::new(1, 0, 0);

/// The config files, in the order they are checked.
pub const FILES: [&str; 7] = [
    "version.json",
    "shells.json",
    "brains.json",
    "agents.json",
    "runtimes.json",
    "projects.json",
    "state.json",
];

/// A project's whole configuration, checked.
#[derive(Debug, Clone)]
pub struct Config {
    pub paths: ProjectPaths,
    pub format: semver::Version,
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

    /// How the file is shown in messages: relative to the project root.
    pub fn display(&self, name: &str) -> String {
        format!("{MODIX_DIR}/{name}")
    }
}

/// Log level from the global settings file, if any.
pub fn settings_log_level() -> Option<String> {
    settings::log_level()
}

/// The loop bound from `runtimes.json`, read leniently before the full load:
/// FSMs compile with it, and the config's checks need the compiled FSMs' ids.
pub fn peek_loop_bound(paths: &ProjectPaths) -> Option<u32> {
    let text = std::fs::read_to_string(paths.file("runtimes.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let n = v.pointer("/loops/default_max")?.as_u64()?;
    u32::try_from(n).ok().filter(|n| *n > 0)
}

/// Reads and checks every config file of the project; `fsm_ids` are the
/// machines agents may name as their lifecycle. Returns the config when there
/// were no errors, and every diagnostic (warnings included) either way.
pub fn load(paths: &ProjectPaths, fsm_ids: &[&str]) -> (Option<Config>, Diagnostics) {
    let mut diags = Diagnostics::new();
    let settings = settings::load(&mut diags);
    let display = |name: &str| format!("{MODIX_DIR}/{name}");
    let read = |name: &str, diags: &mut Diagnostics| {
        source::read(&paths.file(name), &display(name), diags)
    };

    let format = read("version.json", &mut diags)
        .and_then(|f| Some((source::parse::<VersionFile>(&f, "version", &mut diags)?, f)))
        .and_then(|(v, f)| check::format_version(&v, &f, &mut diags));
    let shells_file = read("shells.json", &mut diags);
    let shells = shells_file
        .as_ref()
        .and_then(|f| source::parse::<ShellsFile>(f, "shells", &mut diags))
        .map(|s| check::shells(&s, shells_file.as_ref(), &mut diags));
    let brains_file = read("brains.json", &mut diags);
    let brains = brains_file
        .as_ref()
        .and_then(|f| source::parse::<BrainsFile>(f, "brains", &mut diags))
        .map(|b| check::brains(b, brains_file.as_ref(), &mut diags));
    let agents_file = read("agents.json", &mut diags);
    let agents_raw = agents_file
        .as_ref()
        .and_then(|f| source::parse::<AgentsFile>(f, "agents", &mut diags));
    let runtimes = read("runtimes.json", &mut diags)
        .and_then(|f| source::parse::<Runtimes>(&f, "runtimes", &mut diags));
    let project = read("projects.json", &mut diags)
        .and_then(|f| source::parse::<Project>(&f, "projects", &mut diags));
    if let Some(f) = read("state.json", &mut diags)
        && let Some(v) = source::parse_json(&f, &mut diags)
    {
        source::check_schema(&f, "state", &v, &mut diags);
    }

    // References need the files they point into; skip them when those failed.
    let agents = match (&agents_raw, &shells, &brains, &agents_file) {
        (Some(raw), Some(shells), Some(brains), Some(file)) => Some(check::agents(
            raw,
            file,
            check::Known {
                paths,
                shells,
                brains,
                fsm_ids,
                settings: &settings,
            },
            &mut diags,
        )),
        _ => None,
    };

    if diags.has_errors() {
        return (None, diags);
    }
    match (format, shells, brains, agents, runtimes, project) {
        (Some(format), Some(shells), Some(brains), Some(agents), Some(runtimes), Some(project)) => {
            let config = Config {
                paths: paths.clone(),
                format,
                shells,
                brains,
                agents,
                runtimes,
                project,
                settings,
            };
            (Some(config), diags)
        }
        _ => {
            diags.push(Diagnostic::error(
                "config::internal",
                MODIX_DIR,
                "configuration could not be loaded",
            ));
            (None, diags)
        }
    }
}
